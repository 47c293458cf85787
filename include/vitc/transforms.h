/* Per-image train transforms of the DeiT recipe (timm 0.4.12 create_transform(is_training=True,
 * auto_augment='rand-m9-mstd0.5-inc1', interpolation='bicubic', re_prob=0.25, re_mode='pixel')) on uint8 HWC
 * images (vt_image, 1 or 3 channels), with PIL 9.4's pixel arithmetic:
 *   RandomResizedCrop -> horizontal flip -> RandAugment -> to float, normalise -> RandomErasing (float CHW).
 * Every random draw comes from the caller's vt_rng, in timm's order (each function says which draws it makes), so a
 * test can replay them; vt_rng_uniform is Python's random.random(), vt_rng_below(n+1) its randint(0, n),
 * vt_rng_normal its gauss. */
#ifndef VITC_TRANSFORMS_H
#define VITC_TRANSFORMS_H

#include <stddef.h>

#include "vitc/error.h"
#include "vitc/image.h"
#include "vitc/rng.h"

/* RandAugment's ops, in timm's _RAND_INCREASING_TRANSFORMS order (the index drawn picks from this list). */
typedef enum {
    VT_RA_AUTOCONTRAST,
    VT_RA_EQUALIZE,
    VT_RA_INVERT,
    VT_RA_ROTATE,
    VT_RA_POSTERIZE_INC,
    VT_RA_SOLARIZE_INC,
    VT_RA_SOLARIZE_ADD,
    VT_RA_COLOR_INC,
    VT_RA_CONTRAST_INC,
    VT_RA_BRIGHTNESS_INC,
    VT_RA_SHARPNESS_INC,
    VT_RA_SHEAR_X,
    VT_RA_SHEAR_Y,
    VT_RA_TRANSLATE_X_REL,
    VT_RA_TRANSLATE_Y_REL,
    VT_RA_NUM_OPS
} vt_ra_op;

/* The knobs of the composed train transform (a recipe sets them, prints and saves them with vt_tf_params_format). */
typedef struct vt_tf_params {
    int size;                 /* output height S */
    int width;                /* output width W (0: S) */
    float scale[2];           /* RandomResizedCrop area fraction range (0.08, 1) */
    float ratio[2];           /* its aspect ratio range (3/4, 4/3), drawn log-uniform */
    int interp;               /* its resize filter (VT_INTERP_*; DeiT: bicubic) */
    float hflip;              /* horizontal flip probability (0.5) */
    int ra_layers;            /* RandAugment ops per image (2; 0 turns RandAugment off) */
    float ra_magnitude;       /* magnitude 0..10 (9) */
    float ra_mstd;            /* std of the magnitude's Gaussian noise (0.5; 0: none) */
    float ra_prob;            /* probability each chosen op is applied (0.5) */
    int ra_interp;            /* rotate/shear/translate filter: timm passes the train interpolation (bicubic) */
    double translate_pct;     /* TranslateXRel/YRel range: ±translate_pct of the side at magnitude 10 (0.45) */
    unsigned char fill[3];    /* geometric ops' fill colour: round(255·mean) = (124, 116, 104) for ImageNet */
    float mean[3], std[3];    /* normalisation per channel of x/255 */
    float re_prob;            /* RandomErasing probability (0.25; 0: off) */
    float re_min_area, re_max_area; /* erased area fraction range (0.02, 1/3) */
    float re_min_aspect;      /* log-uniform aspect in (min, 1/min) (0.3) */
    int re_count;             /* most erased rectangles: randint(1, re_count) of them (1) */
    int three;                /* 1: the MSF's --auto-augment three after the flip (vt_three_augment; 0: off) */
} vt_tf_params;

/* DeiT's train transform at S×S with ImageNet mean/std (the defaults noted above); set .width for S×W. */
vt_tf_params vt_tf_deit(int size);

/* The output width of p: p->width, or p->size where it is 0. */
static inline int vt_tf_params_width(const vt_tf_params *p) { return p->width > 0 ? p->width : p->size; }

/* Checks every knob's range; a clear error names the first bad one. */
int vt_tf_params_check(const vt_tf_params *p, vt_err *e);

/* Writes the knobs as one line "key=value ..." (for run logs and saved recipes) into buf; returns snprintf's count. */
int vt_tf_params_format(const vt_tf_params *p, char *buf, size_t n);

/* Draws a RandomResizedCrop box (timm/torchvision get_params) for a w×h image into box = {x0, y0, cw, ch}: up to 10
 * attempts, each uniform() for the area fraction and uniform() for the log aspect ratio, then below() for the top
 * and below() for the left when the box fits (0 < side <= image side); else the central crop clamped to the ratio
 * range. */
int vt_tf_rrc_box(int w, int h, const float scale[2], const float ratio[2], vt_rng *rng, int box[4], vt_err *e);

/* Mirrors img left-right in place (PIL's FLIP_LEFT_RIGHT). */
void vt_tf_hflip(vt_image *img);

/* What one RandAugment op did (for tests). */
typedef struct vt_ra_step {
    int op;           /* vt_ra_op */
    int applied;      /* 0 when its probability draw skipped it */
    double magnitude; /* after noise and clipping to [0, 10] */
    int negate;       /* the sign draw of signed ops */
    int interp;       /* the filter of geometric ops */
} vt_ra_step;

/* Applies op at `magnitude` (0..10, timm's level-to-argument mapping; negate flips signed ops' sign; interp is the
 * filter of rotate/shear/translate, bilinear or bicubic; fill their out-of-image colour, fill[0] for 1-channel images)
 * to img in place, with PIL's semantics (ImageOps, ImageEnhance blends, Image.transform AFFINE, Image.rotate).
 * translate_pct as in vt_tf_params. */
int vt_ra_apply(vt_image *img, int op, double magnitude, int negate, int interp, double translate_pct,
                const unsigned char fill[3], vt_err *e);

/* RandAugment (timm's RandAugment of AugmentOps) on img in place with p's ra_* knobs. Draws: ra_layers op indices
 * (below(15) each, with replacement) first; then per op: uniform() (skipped when > ra_prob), normal() for the
 * magnitude noise when ra_mstd > 0, uniform() for the sign of signed ops (negate when > 0.5), below(2) for the
 * filter of geometric ops when ra_interp is random. steps (may be NULL) receives ra_layers records. */
int vt_randaugment(vt_image *img, const vt_tf_params *p, vt_rng *rng, vt_ra_step *steps, vt_err *e);

/* One draw of the MSF's --auto-augment three (for tests and replays). */
typedef struct vt_three_step {
    int choice;       /* 0 Grayscale(3), 1 RandomSolarize(128, p=1), 2 GaussianBlur(11) */
    double sigma;     /* the blur's σ */
    int order[4];     /* ColorJitter's op order (torchvision's fn_idx): 0 brightness, 1 contrast, 2 saturation, 3 hue */
    double factor[3]; /* the brightness, contrast and saturation factors, each in [0.7, 1.3] */
} vt_three_step;

/* The MSF's `--auto-augment three` (its presets.py: torchvision's ops on PIL images): RandomChoice of Grayscale(3),
 * RandomSolarize(128, p=1) and GaussianBlur(11, σ in (0.1, 2)), then ColorJitter(0.3, 0.3, 0.3), on img in place.
 * Draws: below(3) for the choice, uniform() for σ when it is the blur, a permutation of the 4 jitter ops (Fisher-Yates:
 * below(i + 1) for i = 3, 2, 1), then uniform() for each factor; step (may be NULL) receives them. */
int vt_three_augment(vt_image *img, vt_rng *rng, vt_three_step *step, vt_err *e);

/* vt_three_augment's ops with the draws in s (PIL's and torchvision's semantics: see transforms.c). */
int vt_three_apply(vt_image *img, const vt_three_step *s, vt_err *e);

/* timm's RandomErasing in 'pixel' mode on x (C, H, W floats): uniform() > prob skips; else per rectangle up to 10
 * attempts of uniform() for the area, uniform() for the log aspect, below() for the top and below() for the left
 * when it fits, then C·h·w normal() values (channel-major). box (may be NULL) receives {x0, y0, w, h} of the last
 * rectangle, or zeros when none. */
int vt_random_erasing(float *x, int C, int H, int W, const vt_tf_params *p, vt_rng *rng, int box[4], vt_err *e);

/* The composed DeiT train transform of src (src->chans == 1 or 3) into out (chans, S, W floats): RandomResizedCrop
 * to S×W (its box, then below(2) for the filter when p->interp is random), flip (uniform() < hflip, no draw when
 * hflip is 0), RandAugment (when ra_layers > 0), the three-augment (when three is set), x/255, (x - mean)/std,
 * RandomErasing (when re_prob > 0); draws in that order. */
int vt_tf_deit_train(const vt_image *src, const vt_tf_params *p, vt_rng *rng, float *out, vt_err *e);

#endif
