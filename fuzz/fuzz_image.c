/* libFuzzer target: the image path of `vitc predict` — decoding an untrusted file (libpng, libjpeg-turbo,
 * stb_image with truncation checks) and the model's eval preprocessing — must accept or reject any input without
 * crashing, reading out of bounds or returning an image with the wrong number of pixels. */
#include <stdint.h>
#include <stdlib.h>

#include "vitc/image.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const int chans = size && (data[0] & 1) ? 1 : 3;
    vt_image img;
    vt_err e = {0};
    if (vt_image_decode(data, size, chans, (size && (data[size - 1] & 1)) ? 16 : 0, &img, &e) != 0) {
        if (!e.msg[0] || img.pix) abort(); /* every rejection says why and leaves nothing allocated */
        return 0;
    }
    if (!img.pix || img.chans != chans || img.w < 1 || img.h < 1 || img.w > VT_IMAGE_MAX_SIDE || img.h > VT_IMAGE_MAX_SIDE)
        abort();
    volatile unsigned sum = 0; /* every pixel byte must be readable (ASan checks the extent) */
    for (size_t i = 0; i < (size_t)img.w * img.h * chans; i++) sum += img.pix[i];
    (void)sum;
    if ((size_t)img.w * img.h <= 4096 * 4096) { /* timm-style eval transform to 32×32, or 32×W (W 8..71, a tuple size) */
        const int W = size > 1 && (data[1] & 2) ? 8 + data[1] % 64 : 32;
        const vt_preprocess p = {32, chans, 0.875f, {0.485f, 0.456f, 0.406f}, {0.229f, 0.224f, 0.225f}, 0, W,
                                 size > 1 && (data[1] & 4) ? VT_INTERP_BILINEAR : VT_INTERP_BICUBIC};
        float *out = malloc(sizeof(float) * 32 * (size_t)W * (size_t)chans);
        if (out && vt_image_preprocess(img.pix, img.w, img.h, &p, out, &e) != 0 && !e.msg[0]) abort();
        free(out);
    }
    vt_image_free(&img);
    return 0;
}
