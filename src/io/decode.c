/* Decoding untrusted image files. PNG goes through libpng (every chunk CRC and the zlib Adler-32 checked, a truncated
 * stream is an error; 16-bit samples as PIL reads them), JPEG through libjpeg-turbo's libjpeg API (a warning of lost or
 * damaged data, e.g. a premature end of data, is an error; CMYK converted as PIL does; optional DCT-domain
 * downscaling), binary PNM (P5, P6) is read here (header and samples as PIL reads them), and BMP, GIF, TGA, PSD and HDR
 * through stb_image (16-bit BMP's 5- and 6-bit fields widened as PIL does) once a walk of the file's structure has
 * checked that every byte stb_image will read lies in the file (past the end it reads zeros instead of failing, or for
 * HDR loops forever). Other formats stb_image reads (Softimage PIC, ASCII PNM) are refused. Files are read whole, from
 * regular files and from pipes alike. Colour conversion follows PIL's convert(): RGB -> L with ITU-R 601-2 luma in PIL
 * 9.4's fixed point (L = (19595 R + 38470 G + 7471 B + 2^15) >> 16; the rounded (299 R + 587 G + 114 B) / 1000 differs
 * from it on ~0.05% of pixels), L -> RGB by copying, alpha dropped. */
#include <errno.h>
#include <fcntl.h>
#include <fenv.h>
#include <math.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <png.h>
#include <stb_image.h>
#include <jpeglib.h>
#include <jerror.h>

#include "vitc/fileio.h"
#include "vitc/image.h"

void vt_image_free(vt_image *img) {
    free(img->pix);
    img->pix = NULL;
}

unsigned char *vt_image_convert(const unsigned char *src, int w, int h, int from, int to, vt_err *e) {
    const size_t np = (size_t)w * (size_t)h;
    unsigned char *dst = malloc(np * (size_t)to);
    if (!dst) {
        vt_seterr_code(e, VT_E_NOMEM, "out of memory (%d×%d image)", w, h);
        return NULL;
    }
    for (size_t i = 0; i < np; i++) {
        const unsigned char *s = src + i * (size_t)from;
        unsigned char *d = dst + i * (size_t)to;
        if (from <= 2) { /* L or LA */
            for (int c = 0; c < to; c++) d[c] = s[0];
        } else if (to == 3) {
            d[0] = s[0], d[1] = s[1], d[2] = s[2];
        } else { /* PIL 9.4's rgb2l: ITU-R 601-2 luma in 16-bit fixed point, rounded */
            d[0] = (unsigned char)((s[0] * 19595u + s[1] * 38470u + s[2] * 7471u + 0x8000u) >> 16);
        }
    }
    return dst;
}

/* Checks the image header's size before decoding: each side 1..VT_IMAGE_MAX_SIDE, at most VT_IMAGE_MAX_PIXELS. */
static int check_size(int w, int h, vt_err *e) {
    if (w < 1 || h < 1 || w > VT_IMAGE_MAX_SIDE || h > VT_IMAGE_MAX_SIDE)
        return vt_seterr(e, "the image header declares %d×%d pixels (each side must be 1..%d)%s", w, h,
                         VT_IMAGE_MAX_SIDE, w < 1 || h < 1 ? ": a corrupt or cut file?" : "");
    if ((long long)w * h > VT_IMAGE_MAX_PIXELS)
        return vt_seterr(e, "the image header declares %d×%d pixels, more than %lld (PIL refuses such an image as a "
                         "decompression bomb too)", w, h, VT_IMAGE_MAX_PIXELS);
    return 0;
}

/* ---- PNG (libpng) ---- */

typedef struct {
    const unsigned char *p;
    size_t n, at;
    char msg[256];
} png_src;

static void png_read_mem(png_structp png, png_bytep out, png_size_t len) {
    png_src *s = png_get_io_ptr(png);
    if (len > s->n - s->at) png_error(png, "truncated file (data ends inside a chunk)");
    memcpy(out, s->p + s->at, len);
    s->at += len;
}

static void png_on_error(png_structp png, png_const_charp msg) {
    png_src *s = png_get_io_ptr(png);
    snprintf(s->msg, sizeof s->msg, "%s", msg);
    png_longjmp(png, 1);
}

static void png_on_warning(png_structp png, png_const_charp msg) {
    (void)png;
    (void)msg; /* ancillary-chunk problems: the CRC action below turns their CRC errors into errors */
}

static int decode_png(const unsigned char *buf, size_t n, int chans, vt_image *img, vt_err *e) {
    if (n >= 24 && memcmp(buf + 12, "IHDR", 4) == 0) { /* the size first: a clear message before any decoding */
        const uint32_t w = (uint32_t)buf[16] << 24 | (uint32_t)buf[17] << 16 | (uint32_t)buf[18] << 8 | buf[19];
        const uint32_t h = (uint32_t)buf[20] << 24 | (uint32_t)buf[21] << 16 | (uint32_t)buf[22] << 8 | buf[23];
        if (check_size(w > INT32_MAX ? -1 : (int)w, h > INT32_MAX ? -1 : (int)h, e)) return -1;
    }
    png_src src = {buf, n, 0, ""};
    png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &src, png_on_error, png_on_warning);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    if (!png || !info) {
        png_destroy_read_struct(&png, &info, NULL);
        return vt_seterr_code(e, VT_E_NOMEM, "out of memory (libpng)");
    }
    unsigned char *volatile raw = NULL;
    png_bytep *volatile rows = NULL;
    volatile int rc = 0;
    if (setjmp(png_jmpbuf(png))) {
        rc = vt_seterr(e, "corrupt PNG: %s", src.msg[0] ? src.msg : "decoding failed");
    } else {
        png_set_read_fn(png, &src, png_read_mem);
        png_set_crc_action(png, PNG_CRC_ERROR_QUIT, PNG_CRC_ERROR_QUIT); /* every chunk's CRC, critical or not */
        png_read_info(png, info);
        const int w = (int)png_get_image_width(png, info), h = (int)png_get_image_height(png, info);
        if (check_size(w, h, e)) {
            rc = -1;
        } else {
            const int type = png_get_color_type(png, info), depth = png_get_bit_depth(png, info);
            /* PIL 9.4 opens 16-bit gray as mode I, whose convert() clips each value at 255 (a tRNS colour changes no
             * pixel there); of 16-bit RGB, RGBA and gray+alpha it keeps the high byte */
            const int gray16 = depth == 16 && type == PNG_COLOR_TYPE_GRAY;
            if (depth == 16 && !gray16) png_set_strip_16(png);
            if (type == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
            if (type == PNG_COLOR_TYPE_GRAY && png_get_bit_depth(png, info) < 8) png_set_expand_gray_1_2_4_to_8(png);
            png_set_interlace_handling(png);
            png_read_update_info(png, info);
            const int from = png_get_channels(png, info);
            const size_t stride = png_get_rowbytes(png, info);
            raw = malloc(stride * (size_t)h);
            rows = malloc(sizeof(png_bytep) * (size_t)h);
            if (!raw || !rows) {
                rc = vt_seterr_code(e, VT_E_NOMEM, "out of memory (%d×%d PNG)", w, h);
            } else if (stride != (size_t)w * (size_t)from * (gray16 ? 2 : 1)) {
                rc = vt_seterr(e, "PNG of %d×%d pixels: unsupported layout (%zu bytes a row)", w, h, stride);
            } else {
                for (int y = 0; y < h; y++) rows[y] = raw + (size_t)y * stride;
                png_read_image(png, rows);
                png_read_end(png, NULL); /* reads to IEND: CRCs and the zlib stream's Adler-32 are checked */
                for (size_t i = 0; gray16 && i < (size_t)w * (size_t)h; i++) { /* in place: byte i after 2i, 2i+1 */
                    const unsigned v = (unsigned)raw[2 * i] << 8 | raw[2 * i + 1];
                    raw[i] = (unsigned char)(v > 255 ? 255 : v);
                }
                img->w = w;
                img->h = h;
                img->chans = chans;
                img->pix = vt_image_convert(raw, w, h, from, chans, e);
                if (!img->pix) rc = -1;
            }
        }
    }
    free(raw);
    free(rows);
    png_destroy_read_struct(&png, &info, NULL);
    return rc;
}

/* ---- JPEG (libjpeg-turbo's libjpeg API) ---- */

typedef struct {
    struct jpeg_error_mgr pub;
    jmp_buf jb;
    char msg[JMSG_LENGTH_MAX];
} jpeg_fail;

static void jpeg_on_error(j_common_ptr c) {
    jpeg_fail *f = (jpeg_fail *)c->err;
    c->err->format_message(c, f->msg);
    longjmp(f->jb, 1);
}

/* Warnings (level -1) that leave every pixel as the file stores it are ignored, as PIL ignores them: bytes between
 * markers, an unknown JFIF revision or Adobe transform code, a bad ICC marker (vitc reads no ICC profile). Any other
 * warning means lost or damaged image data (a premature end of the file or of a data segment, a bad Huffman or
 * arithmetic code, a resync, a bad progression) and is an error, where libjpeg would fill the damaged blocks with
 * grey (PIL refuses a cut file but draws the other damage). */
static void jpeg_on_message(j_common_ptr c, int level) {
    if (level >= 0) return; /* trace messages */
    const int code = c->err->msg_code;
    if (code == JWRN_EXTRANEOUS_DATA || code == JWRN_JFIF_MAJOR || code == JWRN_ADOBE_XFORM || code == JWRN_BOGUS_ICC)
        return;
    jpeg_on_error(c);
}

/* PIL 9.4's CMYK JPEG -> RGB, in place (np pixels of 4 bytes become np of 3): the file's values read as Adobe's
 * inverted CMYK ("CMYK;I"), then its cmyk2rgb, v = (255 - K) - X·(255 - K) / 255 in its rounded fixed point
 * (checked against PIL in tests/reference/test_predict.py). */
static void cmyk_to_rgb(unsigned char *p, size_t np) {
    for (size_t i = 0; i < np; i++) {
        const int x[3] = {255 - p[4 * i], 255 - p[4 * i + 1], 255 - p[4 * i + 2]}, nk = p[4 * i + 3];
        for (int c = 0; c < 3; c++) {
            const int t = x[c] * nk + 128, v = nk - (((t >> 8) + t) >> 8);
            p[3 * i + (size_t)c] = (unsigned char)(v < 0 ? 0 : v);
        }
    }
}

static int decode_jpeg(const unsigned char *buf, size_t n, int chans, int min_side, vt_image *img, vt_err *e) {
    struct jpeg_decompress_struct d;
    jpeg_fail f;
    d.err = jpeg_std_error(&f.pub);
    f.pub.error_exit = jpeg_on_error;
    f.pub.emit_message = jpeg_on_message;
    f.msg[0] = 0;
    unsigned char *volatile raw = NULL;
    JSAMPROW *volatile rows = NULL;
    volatile int rc = 0;
    if (setjmp(f.jb)) {
        rc = f.pub.msg_code == JERR_OUT_OF_MEMORY ? vt_seterr_code(e, VT_E_NOMEM, "out of memory (libjpeg)")
                                                  : vt_seterr(e, "corrupt JPEG: %s", f.msg);
    } else {
        jpeg_create_decompress(&d);
        jpeg_mem_src(&d, buf, (unsigned long)n);
        if (jpeg_read_header(&d, FALSE) != JPEG_HEADER_OK) {
            rc = vt_seterr(e, "corrupt JPEG: no frame header (a file of tables only, or cut before its image size)");
        } else if (check_size((int)d.image_width, (int)d.image_height, e)) {
            rc = -1;
        } else {
            const int cmyk = d.jpeg_color_space == JCS_CMYK || d.jpeg_color_space == JCS_YCCK;
            d.out_color_space = cmyk ? JCS_CMYK : d.jpeg_color_space == JCS_GRAYSCALE ? JCS_GRAYSCALE : JCS_RGB;
            d.dct_method = JDCT_ISLOW;
            d.scale_denom = 8; /* the smallest DCT scaling M/8 keeping both sides at least min_side */
            d.scale_num = 8;
            for (unsigned m = 1; min_side > 0 && m < 8; m++)
                if ((d.image_width * m + 7) / 8 >= (unsigned)min_side &&
                    (d.image_height * m + 7) / 8 >= (unsigned)min_side) {
                    d.scale_num = m;
                    break;
                }
            jpeg_start_decompress(&d);
            const int w = (int)d.output_width, h = (int)d.output_height, from = d.output_components;
            const size_t stride = (size_t)w * (size_t)from;
            raw = malloc(stride * (size_t)h);
            rows = malloc(sizeof(JSAMPROW) * (size_t)h);
            if (!raw || !rows) {
                rc = vt_seterr_code(e, VT_E_NOMEM, "out of memory (%d×%d JPEG)", w, h);
            } else {
                for (int y = 0; y < h; y++) rows[y] = raw + (size_t)y * stride;
                while (d.output_scanline < d.output_height) /* as many rows a call as the decoder will give */
                    jpeg_read_scanlines(&d, rows + d.output_scanline, d.output_height - d.output_scanline);
                jpeg_finish_decompress(&d); /* reads to EOI: a file cut after its last scan is an error */
                if (cmyk) cmyk_to_rgb(raw, (size_t)w * h);
                img->w = w;
                img->h = h;
                img->chans = chans;
                img->pix = vt_image_convert(raw, w, h, cmyk ? 3 : from, chans, e);
                if (!img->pix) rc = -1;
            }
        }
    }
    free(raw);
    free(rows);
    jpeg_destroy_decompress(&d);
    return rc;
}

/* ---- binary PNM (P5, P6), read here: stb_image 2.27 neither scales samples by maxval nor reads 16-bit ones
 * big-endian, and reads a header some other way than PIL does ---- */

/* A binary PNM's header: P5 (gray) or P6 (RGB), width, height, maxval, samples from byte `data` on. */
typedef struct {
    int w, h, maxval, chans;
    size_t data;
} pnm_hdr;

/* PNM header whitespace, as PIL and stb_image have it. */
static int pnm_space(unsigned char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

/* Parses the header of a binary PNM (hd starts "P5" or "P6") as PIL and stb_image both read it: the magic, one
 * whitespace byte, then width, height and maxval separated by whitespace (space \t \n \v \f \r) and # comments that
 * end at \n or \r; each number ends with one whitespace byte (a '#' right after a digit is read apart by the two),
 * the one after maxval the last byte before the samples. Numbers must fit an int. */
static int pnm_header(const unsigned char *hd, size_t n, pnm_hdr *p, vt_err *e) {
    static const char *const what[3] = {"width", "height", "maxval"};
    long long v[3] = {0, 0, 0};
    if (n < 3) return vt_seterr(e, "truncated image file (%zu bytes: a PNM header cut after its magic)", n);
    if (!pnm_space(hd[2]))
        return vt_seterr(e, "corrupt PNM header: byte 0x%02x after the magic %c%c, not whitespace", hd[2], hd[0],
                         hd[1]);
    size_t i = 3;
    for (int k = 0; k < 3; k++) {
        while (i < n && (pnm_space(hd[i]) || hd[i] == '#'))
            if (hd[i++] == '#')
                while (i < n && hd[i] != '\n' && hd[i] != '\r') i++;
        if (i >= n)
            return vt_seterr(e, "truncated image file (%zu bytes: the PNM header ends before its %s)", n, what[k]);
        if (hd[i] < '0' || hd[i] > '9')
            return vt_seterr(e, "corrupt PNM header: byte 0x%02x at offset %zu where the %s should be", hd[i], i,
                             what[k]);
        const size_t first = i;
        for (; i < n && hd[i] >= '0' && hd[i] <= '9'; i++)
            if (v[k] <= INT32_MAX) v[k] = v[k] * 10 + (hd[i] - '0'); /* stops growing past INT32_MAX: no overflow */
        if (v[k] > INT32_MAX)
            return vt_seterr(e, "corrupt PNM header: the %s %.*s%s does not fit an int", what[k],
                             (int)(i - first < 24 ? i - first : 24), (const char *)hd + first,
                             i - first > 24 ? "..." : "");
        if (i >= n)
            return vt_seterr(e, "truncated image file (%zu bytes: the PNM header ends after its %s)", n, what[k]);
        if (!pnm_space(hd[i]))
            return vt_seterr(e, "corrupt PNM header: byte 0x%02x after the %s, not whitespace", hd[i], what[k]);
        i++;
    }
    *p = (pnm_hdr){(int)v[0], (int)v[1], (int)v[2], hd[1] == '6' ? 3 : 1, i};
    return 0;
}

/* Decodes a binary PNM as PIL 9.4 reads it (PpmImagePlugin), samples two bytes big-endian each for maxval > 255:
 * maxval 255 as stored; a P5 of maxval > 255 is its mode I, samples scaled to [0, 65535] (maxval 65535: as stored),
 * which convert() clips at 255; others scaled to [0, 255]. Scaling is min(top, round(v / maxval * top)), Python's
 * round of the double (half to even, as rint); maxval outside [1, 65535] is refused, as PIL does. */
static int decode_pnm(const unsigned char *buf, size_t n, int chans, vt_image *img, vt_err *e) {
    pnm_hdr p = {0, 0, 0, 0, 0};
    if (pnm_header(buf, n, &p, e) || check_size(p.w, p.h, e)) return -1;
    if (p.maxval < 1 || p.maxval > 65535)
        return vt_seterr(e, "corrupt PNM image: maxval %d is outside [1, 65535]", p.maxval);
    const size_t count = (size_t)p.w * (size_t)p.h * (size_t)p.chans, bps = p.maxval > 255 ? 2 : 1;
    if (n - p.data < count * bps)
        return vt_seterr(e, "truncated image file (%zu bytes, the header's pixels need %zu)", n, p.data + count * bps);
    const unsigned char *s = buf + p.data;
    const int wide = p.chans == 1 && p.maxval > 255, as_stored = p.maxval == 255 || (wide && p.maxval == 65535);
    const double m = p.maxval, top = wide ? 65535 : 255;
    unsigned char *pix = malloc(count);
    if (!pix) return vt_seterr_code(e, VT_E_NOMEM, "out of memory (%d×%d image)", p.w, p.h);
    const int mode = fegetround(); /* Python's arithmetic and round: to nearest, whatever the caller's mode */
    fesetround(FE_TONEAREST);
    for (size_t i = 0; i < count; i++) {
        const unsigned v = bps == 2 ? (unsigned)s[2 * i] << 8 | s[2 * i + 1] : s[i];
        const double q = as_stored ? v : fmin(top, rint(v / m * top));
        pix[i] = (unsigned char)(q > 255 ? 255 : q);
    }
    fesetround(mode);
    img->w = p.w;
    img->h = p.h;
    img->chans = chans;
    img->pix = vt_image_convert(pix, p.w, p.h, p.chans, chans, e);
    free(pix);
    return img->pix ? 0 : -1;
}

/* ---- BMP, GIF, TGA, PSD, HDR (stb_image), with checks that every byte stb_image reads lies in the file (past
 * the end it reads zeros, or for HDR loops forever) ---- */

static uint32_t le16(const unsigned char *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8; }
static uint32_t le32(const unsigned char *p) { return le16(p) | le16(p + 2) << 16; }
static uint32_t be16(const unsigned char *p) { return (uint32_t)p[0] << 8 | p[1]; }
static uint32_t be32(const unsigned char *p) { return be16(p) << 16 | be16(p + 2); }

#define FORMATS "PNG, JPEG, BMP, GIF, TGA, binary PNM (P5, P6), PSD, HDR"

/* The formats read with stb_image, told apart by their first bytes as stb_image tells them (no two overlap). */
typedef enum { FMT_NONE, FMT_BMP, FMT_GIF, FMT_TGA, FMT_PSD, FMT_HDR } stb_format;
static const char *const fmt_name[] = {"?", "BMP", "GIF", "TGA", "PSD", "HDR"};

static stb_format stb_kind(const unsigned char *b, size_t n) {
    if (n >= 2 && b[0] == 'B' && b[1] == 'M') return FMT_BMP;
    if (n >= 6 && (memcmp(b, "GIF87a", 6) == 0 || memcmp(b, "GIF89a", 6) == 0)) return FMT_GIF;
    if (n >= 4 && memcmp(b, "8BPS", 4) == 0) return FMT_PSD;
    if ((n >= 11 && memcmp(b, "#?RADIANCE\n", 11) == 0) || (n >= 7 && memcmp(b, "#?RGBE\n", 7) == 0)) return FMT_HDR;
    /* TGA: colour-map type 0 or 1 and a known image type (stb_image tests TGA last, with more rules) */
    if (n >= 3 && b[1] <= 1 && (b[2] == 1 || b[2] == 2 || b[2] == 3 || b[2] == 9 || b[2] == 10 || b[2] == 11))
        return FMT_TGA;
    return FMT_NONE;
}

static int truncated(vt_err *e, const char *fmt, size_t n, const char *where) {
    return vt_seterr(e, "truncated image file (%zu bytes: %s %s)", n, fmt, where);
}

static int too_short(vt_err *e, size_t n, uint64_t need) {
    return vt_seterr(e, "truncated image file (%zu bytes, the header's pixels need %llu)", n, (unsigned long long)need);
}

/* BMP: the header, the pixel rows from the data offset (uncompressed or bit fields), and for palette images every
 * pixel's index inside the palette stb_image reads (entries past it are uninitialised memory there). w, h: the
 * checked size (h = |height|). *green: the green bits of a 16-bit file of the two layouts PIL reads (5 of 5-5-5,
 * uncompressed or bit fields, 6 of 5-6-5 bit fields; red and blue 5), else 0. */
static int bmp_check(const unsigned char *b, size_t n, int w, int h, int *green, vt_err *e) {
    *green = 0;
    if (n < 18) return truncated(e, "BMP", n, "header cut");
    const uint32_t off = le32(b + 10), hsz = le32(b + 14);
    if (hsz != 12 && hsz != 40 && hsz != 56 && hsz != 108 && hsz != 124) return 0; /* stb_image refuses it */
    if (n < 14 + hsz) return truncated(e, "BMP", n, "header cut");
    const int bits = (int)le16(b + (hsz == 12 ? 24 : 28)), comp = hsz == 12 ? 0 : (int32_t)le32(b + 30);
    if (comp == 1 || comp == 2 || comp >= 4 || off > INT32_MAX) return 0; /* RLE, JPEG, PNG: stb_image refuses */
    if (off < 14 + hsz)
        return vt_seterr(e, "corrupt BMP: pixel data offset %u lies inside its %u-byte header", off, 14 + hsz);
    const uint64_t row = ((uint64_t)w * (uint64_t)bits + 31) / 32 * 4, need = off + row * (uint64_t)h;
    if (n < need) return too_short(e, n, need);
    if (bits == 16 && hsz != 12 && comp == 0) *green = 5;
    if (bits == 16 && hsz != 12 && comp == 3 && n >= 66) { /* the masks follow a 40-byte header, or are in it */
        const uint32_t r = le32(b + 54), g = le32(b + 58), bl = le32(b + 62);
        *green = bl != 0x1f ? 0 : r == 0x7c00 && g == 0x3e0 ? 5 : r == 0xf800 && g == 0x7e0 ? 6 : 0;
    }
    if (bits != 1 && bits != 4 && bits != 8) return 0;
    /* stb_image 2.27 reads (offset - 38) / 3 entries of an OS/2 palette (hsz 12), (offset - 14 - hsz) / 4 others */
    const long long psize = hsz == 12 ? ((long long)off - 38) / 3 : ((long long)off - 14 - hsz) / 4;
    if (psize < 1) return vt_seterr(e, "corrupt BMP: its pixel data offset %u leaves no room for a palette", off);
    if (psize > 256) return 0; /* refused by stb_image */
    for (int y = 0; y < h; y++) {
        const unsigned char *r = b + off + (size_t)y * row;
        for (int x = 0; x < w; x++) {
            const int i = bits == 8   ? r[x]
                          : bits == 4 ? (r[x / 2] >> (x & 1 ? 0 : 4)) & 15
                                      : (r[x / 8] >> (7 - x % 8)) & 1;
            if (i >= psize)
                return vt_seterr(e, "corrupt BMP: pixel %d of row %d uses palette entry %d, past the %lld read", x, y,
                                 i, psize);
        }
    }
    return 0;
}

/* The pixels the LZW data of a GIF image yields (the code size byte at b[at], then its sub-blocks), decoded as
 * stb_image 2.27 decodes them (a clear code first, codes up to the next free entry, widths growing to 12 bits), up to
 * the end code, the zero-length sub-block or `need` pixels, whichever comes first; -1 where stb_image would refuse the
 * data itself (it then says why). Only the strings' lengths are kept, not their pixels. A frame whose data ends early
 * is decoded by stb_image with its last pixels left black, where PIL refuses it. */
static int64_t gif_pixels(const unsigned char *b, size_t n, size_t at, int64_t need) {
    if (at >= n || b[at] > 12) return -1;
    const int lzw = b[at++], clear = 1 << lzw;
    uint16_t len[8193]; /* each code's string length: at most the 8192 entries stb_image allows */
    for (int c = 0; c < clear; c++) len[c] = 1;
    int codesize = lzw + 1, avail = clear + 2, oldcode = -1, first = 1, valid = 0;
    uint32_t bits = 0;
    int64_t got = 0;
    size_t left = 0; /* bytes left in the current sub-block */
    while (got < need) {
        if (valid < codesize) {
            if (left == 0) {
                if (at >= n) return -1;
                left = b[at++];
                if (left == 0) return got; /* the data's end without an end code */
            }
            if (at >= n) return -1;
            left--;
            bits |= (uint32_t)b[at++] << valid;
            valid += 8;
            continue;
        }
        const int code = (int)(bits & ((1u << codesize) - 1));
        bits >>= codesize;
        valid -= codesize;
        if (code == clear) {
            codesize = lzw + 1, avail = clear + 2, oldcode = -1, first = 0;
        } else if (code == clear + 1) {
            return got;
        } else if (code <= avail && !first) {
            if (oldcode >= 0) {
                if (avail >= 8192) return -1;
                len[avail++] = (uint16_t)(len[oldcode] + 1);
            } else if (code == avail) {
                return -1;
            }
            got += len[code];
            if ((avail & ((1 << codesize) - 1)) == 0 && avail <= 0x0fff) codesize++;
            oldcode = code;
        } else {
            return -1;
        }
    }
    return got;
}

/* A GIF's first image: where it lies on the canvas and the colour PIL gives the canvas outside it. */
typedef struct gif_frame {
    int64_t x, y, w, h;
    unsigned char fill[3]; /* palette[the transparent index, else 0], of the image's own palette, else the global one
                            * ((i, i, i) for an index past it, as PIL's palette is filled) */
} gif_frame;

/* GIF: the blocks up to the first image and that image's data sub-blocks, to their zero-length end, and that their
 * LZW codes yield the image's every pixel (gif_pixels). *transp: 1 + the offset of the flags byte of the graphic
 * control extension that applies to the first image when it marks a transparent colour, else 0; *fr: that image. */
static int gif_check(const unsigned char *b, size_t n, size_t *transp, gif_frame *fr, vt_err *e) {
    *transp = 0;
    *fr = (gif_frame){0, 0, 0, 0, {0, 0, 0}};
    if (n < 13) return truncated(e, "GIF", n, "header cut");
    const size_t global = b[10] & 0x80 ? 13 : 0; /* the global colour table's offset, 0: none */
    size_t at = 13;
    if (global) at += 3 * ((size_t)2 << (b[10] & 7));
    for (;;) {
        if (at >= n) return truncated(e, "GIF", n, "ends before its first image");
        const int tag = b[at++];
        if (tag == 0x2c) { /* image descriptor (9 bytes), local colour table, LZW code size, data sub-blocks */
            if (n - at < 9) return truncated(e, "GIF", n, "image descriptor cut");
            const int flags = b[at + 8];
            const int64_t iw = le16(b + at + 4), ih = le16(b + at + 6);
            *fr = (gif_frame){le16(b + at), le16(b + at + 2), iw, ih, {0, 0, 0}};
            at += 9;
            const size_t pal = flags & 0x80 ? at : global, colours = (size_t)2 << ((pal == at ? flags : b[10]) & 7);
            const size_t index = *transp && *transp + 2 < n ? b[*transp + 2] : 0;
            memset(fr->fill, (int)index, 3); /* past the table: PIL's palette there is its grey ramp (i, i, i) */
            if (pal && index < colours && pal + 3 * index + 3 <= n) memcpy(fr->fill, b + pal + 3 * index, 3);
            if (flags & 0x80) at += 3 * ((size_t)2 << (flags & 7));
            const size_t data = at;
            for (at++;;) {
                if (at >= n) return truncated(e, "GIF", n, "image data cut");
                const size_t len = b[at++];
                if (len == 0) break;
                at += len;
            }
            const int64_t got = gif_pixels(b, n, data, iw * ih);
            if (got >= 0 && got < iw * ih)
                return vt_seterr(e, "corrupt GIF image: its data ends after %lld of its %lldx%lld pixels",
                                 (long long)got, (long long)iw, (long long)ih);
            return 0;
        }
        if (tag != 0x21) /* the trailer (stb_image then fails with no reason set) or an unknown block */
            return vt_seterr(e, "corrupt GIF image: %s before its first image",
                             tag == 0x3b ? "the trailer" : "an unknown block");
        if (at >= n) return truncated(e, "GIF", n, "extension cut");
        if (b[at++] == 0xf9) { /* graphic control: as stb_image reads it, a size other than 4 ends the block */
            if (at >= n) return truncated(e, "GIF", n, "extension cut");
            const size_t len = b[at++];
            if (len == 4 && at < n) *transp = b[at] & 1 ? at + 1 : 0; /* the last one before the image applies */
            at += len;
            if (len != 4) continue;
        }
        for (;;) { /* sub-blocks to a zero-length one */
            if (at >= n) return truncated(e, "GIF", n, "extension cut");
            const size_t len = b[at++];
            if (len == 0) break;
            at += len;
        }
    }
}

/* TGA: the pixels (uncompressed) or the RLE packets up to the last pixel, after the image ID and, in an indexed file,
 * the palette, which stb_image reads after skipping the header's "first entry" count of bytes. */
static int tga_check(const unsigned char *b, size_t n, vt_err *e) {
    if (n < 18) return truncated(e, "TGA", n, "header cut");
    const uint64_t w = le16(b + 12), h = le16(b + 14), bpp = (b[16] + 7) / 8;
    const uint64_t map = b[1] ? le16(b + 3) + (uint64_t)le16(b + 5) * ((b[7] + 7) / 8) : 0, at0 = 18 + b[0] + map;
    if (b[2] < 9) return n < at0 + w * h * bpp ? too_short(e, n, at0 + w * h * bpp) : 0;
    uint64_t at = at0;
    for (uint64_t left = w * h; left > 0;) {
        if (at >= n) return truncated(e, "RLE TGA", n, "pixel packets cut");
        const unsigned head = b[at++], count = (head & 127) + 1;
        at += head & 128 ? bpp : count * bpp;
        left -= count < left ? count : left;
    }
    return at > n ? truncated(e, "RLE TGA", n, "pixel packets cut") : 0;
}

/* PSD: the sections before the image data, then the first four channels (as many as there are) raw or RLE. */
static int psd_check(const unsigned char *b, size_t n, int w, int h, vt_err *e) {
    if (n < 26) return truncated(e, "PSD", n, "header cut");
    const int chans = (int)be16(b + 12), depth = (int)be16(b + 22);
    if (be16(b + 4) != 1 || chans > 16 || (depth != 8 && depth != 16) || be16(b + 24) != 3) return 0; /* refused */
    size_t at = 26;
    for (int k = 0; k < 3; k++) { /* colour mode data, image resources, layer and mask information */
        if (n - at < 4) return truncated(e, "PSD", n, "section length cut");
        const uint32_t len = be32(b + at);
        at += 4;
        if (len > INT32_MAX) return vt_seterr(e, "corrupt PSD: section length %u", len); /* stb_image: to the end */
        if (len > n - at) return truncated(e, "PSD", n, "section cut");
        at += len;
    }
    if (n - at < 2) return truncated(e, "PSD", n, "compression field cut");
    const uint32_t comp = be16(b + at), read = chans < 4 ? (uint32_t)chans : 4;
    const uint64_t px = (uint64_t)w * (uint64_t)h;
    at += 2;
    if (comp > 1) return 0; /* refused by stb_image */
    if (comp == 0) {
        const uint64_t need = at + read * px * (uint64_t)(depth / 8);
        return n < need ? too_short(e, n, need) : 0;
    }
    if (depth == 16)
        return vt_seterr(e, "16-bit RLE-compressed PSD images are not supported (stb_image misreads them)");
    const uint64_t counts = (uint64_t)h * (uint64_t)chans * 2; /* the row byte counts, skipped */
    if (counts > n - at) return truncated(e, "PSD", n, "row byte counts cut");
    at += (size_t)counts;
    for (uint32_t c = 0; c < read; c++)
        for (uint64_t left = px; left > 0;) { /* PackBits: 0..127 copy len+1 bytes, 129..255 repeat one, 128 no-op */
            if (at >= n) return truncated(e, "PSD", n, "RLE data cut");
            const unsigned len = b[at++];
            if (len == 128) continue;
            const uint64_t count = len < 128 ? len + 1 : 257 - len, bytes = len < 128 ? count : 1;
            if (count > left) return 0; /* refused by stb_image */
            if (bytes > n - at) return truncated(e, "PSD", n, "RLE data cut");
            at += (size_t)bytes;
            left -= count;
        }
    return 0;
}

/* HDR: header lines up to an empty one (or one starting with a NUL byte, as stb_image reads them), the size line,
 * then flat RGBE pixels (width < 8, or a scanline not starting 2 2: from there on all flat) or RLE scanlines. */
static int hdr_check(const unsigned char *b, size_t n, int w, int h, vt_err *e) {
    size_t at = 0;
    for (int last = 0; !last;) {
        const unsigned char *nl = at < n ? memchr(b + at, '\n', n - at) : NULL;
        if (!nl) return truncated(e, "HDR", n, "header cut");
        last = b[at] == '\n' || b[at] == 0;
        at = (size_t)(nl - b) + 1;
    }
    const unsigned char *nl = at < n ? memchr(b + at, '\n', n - at) : NULL; /* "-Y h +X w" */
    if (!nl) return truncated(e, "HDR", n, "size line cut");
    at = (size_t)(nl - b) + 1;
    const uint64_t flat = 4 * (uint64_t)w * (uint64_t)h;
    if (w < 8) return n - at < flat ? too_short(e, n, at + flat) : 0;
    for (int y = 0; y < h; y++) {
        if (n - at < 4) return truncated(e, "HDR", n, "scanline cut");
        if (b[at] != 2 || b[at + 1] != 2 || (b[at + 2] & 0x80)) /* not RLE: stb_image reads the image flat */
            return n - at < flat ? too_short(e, n, at + flat) : 0;
        if ((int)(b[at + 2] << 8 | b[at + 3]) != w) return 0; /* refused by stb_image */
        at += 4;
        for (int c = 0; c < 4; c++)
            for (int x = 0; x < w;) { /* > 128: a run of count - 128 of the next byte; else count bytes */
                if (at >= n) return truncated(e, "HDR", n, "RLE scanline cut");
                const int count = b[at++], run = count > 128;
                const int px = run ? count - 128 : count, bytes = run ? 1 : count;
                if (px > w - x) return 0; /* refused by stb_image */
                if ((size_t)bytes > n - at) return truncated(e, "HDR", n, "RLE scanline cut");
                at += (size_t)bytes;
                x += px;
            }
    }
    return 0;
}

/* An HDR file's pixels as 8-bit (malloc'd), as stbi_load maps them with its default settings: pow(v, 1/2.2)·255 +
 * 0.5, clamped (an alpha channel, which HDR files do not have, linearly); NULL as stbi_load fails (its reason in
 * stbi_failure_reason), or with *oom set when this copy cannot be allocated. */
static unsigned char *hdr_to_8bit(const unsigned char *buf, size_t n, int *w, int *h, int *comp, int *oom) {
    float *v = stbi_loadf_from_memory(buf, (int)n, w, h, comp, 0);
    if (!v) return NULL;
    const size_t count = (size_t)*w * (size_t)*h * (size_t)*comp;
    const int colour = *comp & 1 ? *comp : *comp - 1;
    unsigned char *out = malloc(count ? count : 1);
    *oom = !out;
    for (size_t i = 0; out && i < count; i++) {
        const float z = (int)(i % (size_t)*comp) < colour ? (float)pow(v[i], 1.0f / 2.2f) * 255 + 0.5f
                                                          : v[i] * 255 + 0.5f;
        out[i] = (unsigned char)(int)(z < 0 ? 0 : z > 255 ? 255 : z);
    }
    stbi_image_free(v);
    return out;
}

static int decode_stb(const unsigned char *buf, size_t n, int chans, vt_image *img, vt_err *e) {
    const stb_format f = stb_kind(buf, n);
    if (f == FMT_NONE) return vt_seterr(e, "unsupported or unrecognised image format (supported: " FORMATS ")");
    if (n > INT32_MAX) return vt_seterr(e, "file of %zu bytes is too large", n);
    int w = 0, h = 0, from = 0;
    if (!stbi_info_from_memory(buf, (int)n, &w, &h, &from))
        return vt_seterr(e, "corrupt or unsupported %s image (%s)", fmt_name[f], stbi_failure_reason());
    if (f == FMT_BMP && h < 0 && h != INT32_MIN) h = -h; /* a top-down BMP */
    if (check_size(w, h, e)) return -1;
    size_t transp = 0;
    int green = 0;
    gif_frame fr = {0, 0, 0, 0, {0, 0, 0}};
    const int bad = f == FMT_BMP   ? bmp_check(buf, n, w, h, &green, e)
                    : f == FMT_GIF ? gif_check(buf, n, &transp, &fr, e)
                    : f == FMT_TGA ? tga_check(buf, n, e)
                    : f == FMT_PSD ? psd_check(buf, n, w, h, e)
                                   : hdr_check(buf, n, w, h, e);
    if (bad) return -1;
    unsigned char *copy = NULL; /* stb_image leaves a GIF's transparent pixels (0, 0, 0); PIL's convert gives their
                                 * palette colour, which stb_image writes once the transparency flag is cleared */
    if (transp) {
        if (!(copy = malloc(n))) return vt_seterr_code(e, VT_E_NOMEM, "out of memory (a GIF file of %zu bytes)", n);
        memcpy(copy, buf, n);
        copy[transp - 1] &= 0xfe;
    }
    /* libstb's process-wide settings are a host program's (an OpenGL program flips its textures): this thread's flip
     * is set off, and HDR is read as floats and tone-mapped here with stb_image's default gamma 2.2 and scale 1 (the
     * library's own mapping reads globals that have no per-thread form) */
    stbi_set_flip_vertically_on_load_thread(0);
    int oom = 0;
    unsigned char *pix = f == FMT_HDR ? hdr_to_8bit(copy ? copy : buf, n, &w, &h, &from, &oom)
                                      : stbi_load_from_memory(copy ? copy : buf, (int)n, &w, &h, &from, 0);
    free(copy);
    if (oom) return vt_seterr_code(e, VT_E_NOMEM, "out of memory (%d×%d %s image)", w, h, fmt_name[f]);
    if (!pix) {
        const char *why = stbi_failure_reason();
        if (why && strcmp(why, "outofmem") == 0)
            return vt_seterr_code(e, VT_E_NOMEM, "out of memory (%d×%d %s image)", w, h, fmt_name[f]);
        return vt_seterr(e, "corrupt %s image: %s", fmt_name[f], why ? why : "refused by the decoder");
    }
    if (f == FMT_GIF && from >= 3) { /* the canvas outside the first image: stb_image paints the background colour
                                      * (its palette entry's red and blue swapped), PIL fills it as gif_frame says */
        for (int64_t y = 0; y < h; y++)
            for (int64_t x = 0; x < w; x++) {
                if (y >= fr.y && y < fr.y + fr.h && x >= fr.x && x < fr.x + fr.w) continue;
                unsigned char *p = pix + ((size_t)y * (size_t)w + (size_t)x) * (size_t)from;
                memcpy(p, fr.fill, 3);
                if (from == 4) p[3] = 255;
            }
    }
    if (green) { /* stb_image widens a k-bit field v to v << (8 - k) plus v's top bits; PIL to v * 255 / (2^k - 1) */
        const size_t np = (size_t)w * (size_t)h;
        for (size_t i = 0; i < np * (size_t)from; i++) {
            const int k = i % (size_t)from == 1 ? green : 5;
            if (i % (size_t)from < 3) pix[i] = (unsigned char)((pix[i] >> (8 - k)) * 255 / ((1 << k) - 1));
        }
    }
    img->w = w;
    img->h = h;
    img->chans = chans;
    img->pix = vt_image_convert(pix, w, h, from, chans, e);
    if (f == FMT_HDR)
        free(pix);
    else
        stbi_image_free(pix);
    return img->pix ? 0 : -1;
}

/* vt_size_fn of a streamed image (vt_image_read): its first 16 bytes, then the rest only when they start a format
 * vt_image_decode reads (a stream of anything else, e.g. /dev/zero, stops there and is refused as unrecognised). */
static size_t stream_size(const unsigned char *b, size_t len, void *arg) {
    (void)arg;
    static const unsigned char png_sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    if (len < 16) return 16;
    const int known = memcmp(b, png_sig, 8) == 0 || (b[0] == 0xff && b[1] == 0xd8) ||
                      (b[0] == 'P' && (b[1] == '5' || b[1] == '6')) || stb_kind(b, len) != FMT_NONE;
    return known ? SIZE_MAX : len;
}

int vt_image_read(const char *path, unsigned char **buf, size_t *n, vt_err *e) {
    return vt_read_sized(path, VT_IMAGE_MAX_BYTES, stream_size, NULL, buf, n, e);
}

int vt_image_decode(const unsigned char *buf, size_t n, int chans, int min_side, vt_image *img, vt_err *e) {
    memset(img, 0, sizeof *img);
    if (chans != 1 && chans != 3) return vt_seterr(e, "images decode to 1 or 3 channels, not %d", chans);
    if (n == 0) return vt_seterr(e, "empty file");
    static const unsigned char png_sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    if (n >= 8 && memcmp(buf, png_sig, 8) == 0) return decode_png(buf, n, chans, img, e);
    if (n >= 2 && buf[0] == 0xff && buf[1] == 0xd8) return decode_jpeg(buf, n, chans, min_side, img, e);
    if (n >= 2 && buf[0] == 'P' && (buf[1] == '5' || buf[1] == '6')) return decode_pnm(buf, n, chans, img, e);
    return decode_stb(buf, n, chans, img, e);
}
