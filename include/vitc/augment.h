/* Per-sample transforms of the loader (vt_transform: random crop with zero padding and horizontal flip, the eval
 * transform, the DeiT train transform), index shuffling, and an in-memory dataset as a vt_source. */
#ifndef VITC_AUGMENT_H
#define VITC_AUGMENT_H

#include "vitc/dataset.h"
#include "vitc/error.h"
#include "vitc/loader.h"
#include "vitc/rng.h"
#include "vitc/transforms.h"

/* Sets idx[i] = i for i in [0, n). */
void vt_iota(int *idx, int n);

/* Shuffles idx[0..n) in place (Fisher-Yates driven by rng). */
void vt_shuffle(int *idx, int n, vt_rng *rng);

/* Parameters of vt_transform_crop_flip: resize the shorter side to size (PIL's bicubic, vt_image_resize, as the eval
 * transform; no-op when it already is; for size×width outputs the image is scaled, aspect kept, until it covers
 * them), random crop size×width after zero padding by pad pixels (torchvision RandomCrop((size, width), pad)),
 * horizontal flip with probability 0.5 when hflip, normalise (x/255 - mean) / std per channel. Random draws per
 * image, in order: crop row offset, crop column offset, flip. */
typedef struct vt_crop_flip {
    int size, chans, pad, hflip;
    float mean[3], std[3];
    int width; /* 0: size */
} vt_crop_flip;

/* The transform applying cf (which must outlive it; it needs an rng); crop_flip(28, pad 4, flip) is Fashion-MNIST's
 * training augmentation, and crop_flip(S, pad S/7, flip) the default training transform of image folders. */
vt_transform vt_transform_crop_flip(const vt_crop_flip *cf);

/* The eval transform of a model's pretrained cfg (vt_image_preprocess; p must outlive it); draws nothing. */
vt_transform vt_transform_eval(const vt_preprocess *p);

/* The DeiT train transform (vt_tf_deit_train, include/vitc/transforms.h) of p (which must outlive it) for images of
 * `chans` channels, as a loader transform. */
vt_transform vt_transform_deit(const vt_tf_params *p, int chans);

/* A source over an in-memory dataset (ds must outlive it); get() copies the pixels (chans 1, or 3 by repeating). */
vt_source vt_source_dataset(const vt_dataset *ds);

#endif
