/* Image files to model inputs: decoding (stb_image) and timm's eval preprocessing (resize the shorter side to
 * floor(S / crop_pct) with a bicubic filter, centre-crop S×S with zero padding when the crop is larger, scale to
 * [0, 1], normalise per channel). */
#ifndef VITC_IMAGE_H
#define VITC_IMAGE_H

#include "vitc/error.h"

/* Eval preprocessing of one model (from its pretrained cfg). */
typedef struct vt_preprocess {
    int size;           /* output height = width S */
    int chans;          /* 1 (grayscale) or 3 (RGB) */
    float crop_pct;     /* > 0; the shorter side is resized to floor(S / crop_pct) */
    float mean[3], std[3];
} vt_preprocess;

/* Largest accepted image side in pixels (larger files are refused before decoding their pixels). */
#define VT_IMAGE_MAX_SIDE 16384

/* Preprocesses w×h pixels of `chans` interleaved uint8 channels (chans == p->chans) into out (chans, S, S). */
int vt_image_preprocess(const unsigned char *pix, int w, int h, const vt_preprocess *p, float *out, vt_err *e);

/* Decodes the image file at path (PNG, JPEG, BMP, GIF, TGA, PNM, PSD, HDR; converted to p->chans channels) and
 * preprocesses it into out (chans, S, S); an unreadable, corrupt or oversized file gives an error naming it. */
int vt_image_load(const char *path, const vt_preprocess *p, float *out, vt_err *e);

#endif
