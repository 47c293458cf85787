/* Image files to model inputs: decoding (stb_image) and timm's eval preprocessing (resize the shorter side to
 * floor(S / crop_pct) with a bicubic filter (bilinear where the model's cfg says so), centre-crop S×S with zero
 * padding when the crop is larger, scale to [0, 1], normalise per channel; an H×W output as timm's tuple img_size:
 * both sides resized, then the centre crop). */
#ifndef VITC_IMAGE_H
#define VITC_IMAGE_H

#include "vitc/fileio.h"

/* Eval preprocessing of one model (from its pretrained cfg). */
typedef struct vt_preprocess {
    int size;           /* output height S (and width, unless `width` says otherwise) */
    int chans;          /* 1 (grayscale) or 3 (RGB) */
    float crop_pct;     /* > 0; the shorter side is resized to floor(S / crop_pct) */
    float mean[3], std[3];
    int squash;         /* 1: both sides are resized to floor(S / crop_pct) (the aspect ratio is not kept) */
    int width;          /* output width W; 0: S. W != S: the image is resized to floor(S / crop_pct) rows and
                         * floor(W / crop_pct) columns, aspect not kept (timm's eval transform of a tuple size) */
    int interp;         /* the resize filter: VT_INTERP_BILINEAR (2), else bicubic (0 or VT_INTERP_BICUBIC) */
} vt_preprocess;

/* The output width of p: p->width, or p->size where it is 0. */
static inline int vt_preprocess_width(const vt_preprocess *p) { return p->width > 0 ? p->width : p->size; }

/* Largest accepted image side in pixels, and pixel count (PIL's DecompressionBombError limit, 2 × its
 * MAX_IMAGE_PIXELS); larger files are refused before decoding their pixels. */
#define VT_IMAGE_MAX_SIDE 16384
#define VT_IMAGE_MAX_PIXELS 178956970LL
/* Largest image file read (an uncompressed 16384² RGBA image and its header: the side limit's bound; the pixel cap
 * refuses such an image once its header is read). */
#define VT_IMAGE_MAX_BYTES (((size_t)1 << 30) + ((size_t)1 << 20))

/* A decoded image: w×h pixels of `chans` interleaved 8-bit channels, rows top to bottom. */
typedef struct vt_image {
    int w, h, chans;
    unsigned char *pix;
} vt_image;

/* Decodes an encoded image in memory to `chans` channels (1: PIL's "L", 3: "RGB"): PNG with libpng (CRCs and
 * Adler-32 checked), JPEG with libjpeg-turbo (warnings of lost or damaged data are errors; CMYK converted as PIL
 * does; min_side > 0 allows DCT-domain downscaling while both sides stay >= min_side), binary PNM (P5/P6) here,
 * BMP/GIF/TGA/PSD/HDR with stb_image (a cut file refused); any other format is refused. */
int vt_image_decode(const unsigned char *buf, size_t n, int chans, int min_side, vt_image *img, vt_err *e);

/* Reads the image file at path whole (at most VT_IMAGE_MAX_BYTES) into a new malloc'd buffer (free with free()); a
 * stream (pipe, FIFO, device) whose first 16 bytes start no image format is read no further. */
int vt_image_read(const char *path, unsigned char **buf, size_t *n, vt_err *e);

/* Converts w·h pixels of `from` interleaved channels (1 L, 2 LA, 3 RGB, 4 RGBA) to `to` (1 or 3) in a new malloc'd
 * buffer as PIL's convert() does (RGB -> L: ITU-R 601-2 luma in PIL 9.4's 16-bit fixed point; L -> RGB: copies;
 * alpha dropped). */
unsigned char *vt_image_convert(const unsigned char *src, int w, int h, int from, int to, vt_err *e);

/* Resampling filters, numbered as PIL's (Image.BILINEAR = 2, Image.BICUBIC = 3); RANDOM picks one of the two per
 * call (timm's _RANDOM_INTERPOLATION). */
typedef enum { VT_INTERP_RANDOM = 0, VT_INTERP_BILINEAR = 2, VT_INTERP_BICUBIC = 3 } vt_interp;

/* Checks img: pixels present, 1 or 3 channels, each side 1..VT_IMAGE_MAX_SIDE. */
int vt_image_check(const vt_image *img, vt_err *e);

/* The eval resize of a side of S pixels, floor(S / crop_pct), with crop_pct taken as the shortest decimal that rounds
 * to the float (0.8f as 0.8, as timm divides by the Python float: 224 / 0.8f is 279.99999 but 224 / 0.8 is 280). */
double vt_crop_resize(int S, float crop_pct);

/* Whether a resize target of w×h pixels is allowed: each side at least 1, at most VT_IMAGE_MAX_PIXELS pixels (no side
 * limit: a long thin image's shorter side resized to the model's size makes a copy wider than VT_IMAGE_MAX_SIDE). */
static inline int vt_image_target_ok(long long w, long long h) {
    return w >= 1 && h >= 1 && w <= VT_IMAGE_MAX_PIXELS / h;
}

/* Resizes the crop box (x0, y0, cw, ch) of src to ow×oh pixels into dst (ow·oh·chans bytes) as PIL 9.4's
 * img.crop(box).resize((ow, oh), filter) (torchvision's resized_crop): separable filter with the support widened
 * by the scale when shrinking, 22-bit fixed-point coefficients, rounded, clipped to 8 bits. filter: bilinear or
 * bicubic (a = -0.5); ow×oh as vt_image_target_ok allows. */
int vt_image_resize(const vt_image *src, int x0, int y0, int cw, int ch, int ow, int oh, vt_interp filter,
                    unsigned char *dst, vt_err *e);

/* Frees a decoded image's pixels. */
void vt_image_free(vt_image *img);

/* Preprocesses w×h pixels of `chans` interleaved uint8 channels (chans == p->chans) into out (chans, S, W). */
int vt_image_preprocess(const unsigned char *pix, int w, int h, const vt_preprocess *p, float *out, vt_err *e);

/* Reads and decodes the image file at path (vt_image_read, vt_image_decode; PNG, JPEG, BMP, GIF, TGA, PNM, PSD, HDR)
 * and preprocesses it into out (chans, S, W); an unreadable, corrupt, truncated or oversized file gives an error
 * naming it. */
int vt_image_load(const char *path, const vt_preprocess *p, float *out, vt_err *e);

#endif
