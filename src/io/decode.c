/* Decoding untrusted image files. PNG goes through libpng (every chunk CRC and the zlib Adler-32 checked, a
 * truncated stream is an error), JPEG through libjpeg-turbo (any warning, e.g. a premature end of data, is an
 * error; optional DCT-domain downscaling), and the formats neither covers (BMP, GIF, TGA, PNM, PSD, HDR) through
 * stb_image, whose results are checked: an uncompressed BMP, PNM or TGA, or an RLE TGA, must hold every pixel its
 * header claims (stb reads zeros past the end of such files instead of failing). Binary PNM samples are read here
 * once stb_image has identified the file (pnm_samples: stb 2.27 neither scales by maxval nor reads 16-bit samples
 * big-endian). Files are read whole, from regular files and from pipes alike. Colour conversion follows PIL's
 * convert(): RGB -> L with ITU-R 601-2 luma in PIL 9.4's fixed point (L = (19595 R + 38470 G + 7471 B + 2^15) >> 16;
 * the rounded (299 R + 587 G + 114 B) / 1000 differs from it on ~0.05% of pixels), L -> RGB by copying, alpha
 * dropped. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <png.h>
#include <stb_image.h>
#include <turbojpeg.h>

#include "vitc/image.h"

void vt_image_free(vt_image *img) {
    free(img->pix);
    img->pix = NULL;
}

unsigned char *vt_image_convert(const unsigned char *src, int w, int h, int from, int to, vt_err *e) {
    const size_t np = (size_t)w * (size_t)h;
    unsigned char *dst = malloc(np * (size_t)to);
    if (!dst) {
        vt_seterr(e, "out of memory (%d×%d image)", w, h);
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

/* Checks the image header's size before decoding: each side 1..VT_IMAGE_MAX_SIDE. */
static int check_size(int w, int h, vt_err *e) {
    if (w < 1 || h < 1 || w > VT_IMAGE_MAX_SIDE || h > VT_IMAGE_MAX_SIDE)
        return vt_seterr(e, "the image header declares %d×%d pixels (each side must be 1..%d)%s", w, h,
                         VT_IMAGE_MAX_SIDE, w < 1 || h < 1 ? ": a corrupt or cut file?" : "");
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
        return vt_seterr(e, "out of memory (libpng)");
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
            const int type = png_get_color_type(png, info);
            if (png_get_bit_depth(png, info) == 16) png_set_strip_16(png); /* PIL keeps the high byte */
            if (type == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
            if (type == PNG_COLOR_TYPE_GRAY && png_get_bit_depth(png, info) < 8) png_set_expand_gray_1_2_4_to_8(png);
            png_set_interlace_handling(png);
            png_read_update_info(png, info);
            const int from = png_get_channels(png, info);
            const size_t stride = png_get_rowbytes(png, info);
            raw = malloc(stride * (size_t)h);
            rows = malloc(sizeof(png_bytep) * (size_t)h);
            if (!raw || !rows || stride != (size_t)w * (size_t)from) {
                rc = vt_seterr(e, "PNG of %d×%d pixels: out of memory or unsupported layout", w, h);
            } else {
                for (int y = 0; y < h; y++) rows[y] = raw + (size_t)y * stride;
                png_read_image(png, rows);
                png_read_end(png, NULL); /* reads to IEND: CRCs and the zlib stream's Adler-32 are checked */
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

/* ---- JPEG (libjpeg-turbo) ---- */

static int decode_jpeg(const unsigned char *buf, size_t n, int chans, int min_side, vt_image *img, vt_err *e) {
    tjhandle tj = tjInitDecompress();
    if (!tj) return vt_seterr(e, "out of memory (libjpeg-turbo)");
    int w, h, sub, space, rc = 0;
    if (tjDecompressHeader3(tj, buf, (unsigned long)n, &w, &h, &sub, &space)) {
        rc = vt_seterr(e, "corrupt JPEG: %s", tjGetErrorStr2(tj));
    } else if (check_size(w, h, e)) {
        rc = -1;
    } else if (space == TJCS_CMYK || space == TJCS_YCCK) {
        rc = vt_seterr(e, "CMYK JPEG images are not supported (convert the file to RGB)");
    } else {
        int sw = w, sh = h, nf = 0;
        const tjscalingfactor *sf = tjGetScalingFactors(&nf);
        for (int i = 0; min_side > 0 && sf && i < nf; i++) { /* the smallest DCT scaling keeping both sides */
            const int tw = TJSCALED(w, sf[i]), th = TJSCALED(h, sf[i]);
            if (tw >= min_side && th >= min_side && (size_t)tw * th < (size_t)sw * sh) sw = tw, sh = th;
        }
        const int from = space == TJCS_GRAY ? 1 : 3;
        unsigned char *raw = malloc((size_t)sw * sh * from);
        if (!raw) {
            rc = vt_seterr(e, "out of memory (%d×%d JPEG)", sw, sh);
        } else if (tjDecompress2(tj, buf, (unsigned long)n, raw, sw, 0, sh, from == 1 ? TJPF_GRAY : TJPF_RGB,
                                 TJFLAG_ACCURATEDCT | TJFLAG_STOPONWARNING)) {
            rc = vt_seterr(e, "corrupt JPEG: %s", tjGetErrorStr2(tj));
        } else {
            img->w = sw;
            img->h = sh;
            img->chans = chans;
            img->pix = vt_image_convert(raw, sw, sh, from, chans, e);
            if (!img->pix) rc = -1;
        }
        free(raw);
    }
    tjDestroy(tj);
    return rc;
}

/* ---- other formats (stb_image), with truncation checks ---- */

static uint32_t le16(const unsigned char *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8; }
static uint32_t le32(const unsigned char *p) { return le16(p) | le16(p + 2) << 16; }

/* Bytes an RLE TGA needs to hold w·h pixels of bpp bytes from offset `at`, or 0 if it cannot (truncated). */
static long long tga_rle_end(const unsigned char *b, size_t n, size_t at, long long pixels, int bpp) {
    while (pixels > 0) {
        if (at >= n) return 0;
        const int head = b[at++], count = (head & 127) + 1;
        at += (size_t)(head & 128 ? bpp : count * bpp);
        pixels -= count;
    }
    return at <= n ? (long long)at : 0;
}

/* A binary PNM's header: P5 (gray) or P6 (RGB), width, height, maxval, samples from byte `data` on. */
typedef struct {
    long long w, h, maxval;
    size_t data;
    int chans;
} pnm_hdr;

/* Parses a binary PNM header: 1 when hd starts one, 0 when it is not one (or not a parsable one), -1 when the file
 * ends inside it. */
static int pnm_header(const unsigned char *hd, size_t n, pnm_hdr *p) {
    if (n < 2 || hd[0] != 'P' || (hd[1] != '5' && hd[1] != '6')) return 0;
    long long v[3] = {0, 0, 0};
    size_t i = 2;
    for (int k = 0; k < 3; k++) { /* width, height, maxval; whitespace and # comments between them */
        while (i < n && (hd[i] == ' ' || hd[i] == '\t' || hd[i] == '\n' || hd[i] == '\r' || hd[i] == '#'))
            if (hd[i++] == '#')
                while (i < n && hd[i] != '\n') i++;
        if (i >= n) return -1; /* the header ends before its three numbers (stb would invent the pixels) */
        if (hd[i] < '0' || hd[i] > '9') return 0;
        while (i < n && hd[i] >= '0' && hd[i] <= '9' && v[k] < (1LL << 31)) v[k] = v[k] * 10 + (hd[i++] - '0');
    }
    *p = (pnm_hdr){v[0], v[1], v[2], i + 1, hd[1] == '6' ? 3 : 1}; /* one whitespace byte after maxval */
    return 1;
}

/* Bytes the file must have for its header's pixels (uncompressed BMP, binary PNM, TGA), 0 when not checkable,
 * -1 for an RLE TGA whose packets end before its pixels do or a binary PNM cut inside its header. */
static long long needed_bytes(const unsigned char *hd, size_t n) {
    if (n >= 34 && hd[0] == 'B' && hd[1] == 'M') {
        const long long off = le32(hd + 10), w = (int32_t)le32(hd + 18), h = (int32_t)le32(hd + 22);
        const int bits = (int)le16(hd + 28), comp = (int)le32(hd + 30);
        if (hd[14] < 40 || (comp != 0 && comp != 3) || w <= 0 || bits <= 0) return 0; /* old/compressed headers */
        return off + (w * bits + 31) / 32 * 4 * (h < 0 ? -h : h);
    }
    pnm_hdr p;
    const int pnm = pnm_header(hd, n, &p);
    if (pnm) return pnm < 0 ? -1 : (long long)p.data + p.w * p.h * p.chans * (p.maxval > 255 ? 2 : 1);
    if (n >= 3 && hd[1] <= 1 && (hd[2] == 1 || hd[2] == 2 || hd[2] == 3 || hd[2] == 9 || hd[2] == 10 || hd[2] == 11)) {
        /* TGA (colour-map type 0 or 1, a known image type; stb_image identifies the same files) */
        if (n < 18) return -1; /* not even the 18-byte header */
        const long long w = le16(hd + 12), h = le16(hd + 14), bpp = (hd[16] + 7) / 8;
        const long long map = hd[1] ? (long long)le16(hd + 5) * ((hd[7] + 7) / 8) : 0, at = 18 + hd[0] + map;
        if (hd[2] < 9) return at + w * h * bpp;
        const long long end = tga_rle_end(hd, n, (size_t)at, w * h, (int)bpp);
        return end ? end : -1;
    }
    return 0;
}

/* A binary PNM's samples (w·h·chans, after the size checks) scaled from [0, maxval] to [0, 255] as PIL reads them:
 * rounded, a sample above maxval reads 255, two bytes big-endian per sample for maxval > 255. Decoded here, not by
 * stb_image 2.27, which returns 8-bit samples unscaled and reads 16-bit ones in the host's byte order (little-endian
 * on x86: a 16-bit file read as noise). NULL with the error set for a maxval outside [1, 65535] (PIL refuses those). */
static unsigned char *pnm_samples(const unsigned char *buf, const pnm_hdr *p, vt_err *e) {
    if (p->maxval < 1 || p->maxval > 65535) {
        vt_seterr(e, "corrupt PNM image: maxval %lld is outside [1, 65535]", p->maxval);
        return NULL;
    }
    const size_t count = (size_t)(p->w * p->h * p->chans);
    const unsigned char *s = buf + p->data;
    const long long m = p->maxval;
    unsigned char *out = malloc(count);
    if (!out) {
        vt_seterr(e, "out of memory (%lld×%lld image)", p->w, p->h);
        return NULL;
    }
    for (size_t i = 0; i < count; i++) {
        const long long v = m > 255 ? (long long)s[2 * i] << 8 | s[2 * i + 1] : s[i];
        out[i] = v >= m ? 255 : (unsigned char)((v * 255 + m / 2) / m);
    }
    return out;
}

static int decode_stb(const unsigned char *buf, size_t n, int chans, vt_image *img, vt_err *e) {
    int w = 0, h = 0, from = 0;
    if (n > INT32_MAX) return vt_seterr(e, "file of %zu bytes is too large", n);
    if (!stbi_info_from_memory(buf, (int)n, &w, &h, &from))
        return vt_seterr(e, "unknown or corrupt image format (%s)", stbi_failure_reason());
    if (check_size(w, h, e)) return -1;
    const long long need = needed_bytes(buf, n);
    if (need < 0 || (need > 0 && (long long)n < need))
        return vt_seterr(e, "truncated image file (%zu bytes, the header's pixels need %lld)", n,
                         need < 0 ? (long long)n + 1 : need);
    pnm_hdr p;
    const int pnm = pnm_header(buf, n, &p) == 1 && p.w == w && p.h == h; /* the file stb_image identified */
    unsigned char *pix = pnm ? pnm_samples(buf, &p, e) : stbi_load_from_memory(buf, (int)n, &w, &h, &from, 0);
    if (!pix) return pnm ? -1 : vt_seterr(e, "corrupt image: %s", stbi_failure_reason());
    if (pnm) from = p.chans;
    img->w = w;
    img->h = h;
    img->chans = chans;
    img->pix = vt_image_convert(pix, w, h, from, chans, e);
    if (pnm)
        free(pix);
    else
        stbi_image_free(pix);
    return img->pix ? 0 : -1;
}

int vt_image_decode(const unsigned char *buf, size_t n, int chans, int min_side, vt_image *img, vt_err *e) {
    memset(img, 0, sizeof *img);
    if (chans != 1 && chans != 3) return vt_seterr(e, "images decode to 1 or 3 channels, not %d", chans);
    if (n == 0) return vt_seterr(e, "empty file");
    static const unsigned char png_sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    if (n >= 8 && memcmp(buf, png_sig, 8) == 0) return decode_png(buf, n, chans, img, e);
    if (n >= 3 && buf[0] == 0xff && buf[1] == 0xd8 && buf[2] == 0xff) return decode_jpeg(buf, n, chans, min_side, img, e);
    return decode_stb(buf, n, chans, img, e);
}
