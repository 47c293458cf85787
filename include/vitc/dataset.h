/* Image-classification datasets held in memory as uint8 pixels: Fashion-MNIST (IDX files, gzip). */
#ifndef VITC_DATASET_H
#define VITC_DATASET_H

#include <stdint.h>

#include "vitc/error.h"

/* Fashion-MNIST per-pixel mean and std of x/255 over the training set. */
#define VT_FMNIST_MEAN 0.2860f
#define VT_FMNIST_STD 0.3530f
/* The same as three-channel initialisers (model configs). */
#define VT_FMNIST_MEAN3 {VT_FMNIST_MEAN, VT_FMNIST_MEAN, VT_FMNIST_MEAN}
#define VT_FMNIST_STD3 {VT_FMNIST_STD, VT_FMNIST_STD, VT_FMNIST_STD}
/* Where Debian's dataset-fashion-mnist package installs the files. */
#define VT_FMNIST_DEFAULT_DIR "/usr/share/datasets/fashion-mnist"

/* n grayscale images of h x w uint8 pixels (row-major, image after image) and their labels. */
typedef struct vt_dataset {
    int n, h, w;       /* image count, rows, columns */
    int nclasses;      /* every label is < nclasses */
    uint8_t *images;   /* n * h * w pixels (vt_alloc) */
    uint8_t *labels;   /* n labels (vt_alloc) */
} vt_dataset;

/* Directory used when none is given: $VITC_FMNIST_DIR if set and non-empty, else VT_FMNIST_DEFAULT_DIR. */
const char *vt_fmnist_dir(void);

/* Loads the Fashion-MNIST train (train != 0, 60000 images) or test (10000) split from dir (NULL: vt_fmnist_dir())
 * into ds: images (n, 28, 28), labels < 10. Validates magic numbers, sizes, counts and labels; ds is untouched on error. */
int vt_dataset_load_fmnist(const char *dir, int train, vt_dataset *ds, vt_err *e);


/* Keeps only the first min(k, n) images (k >= 1), releasing the rest. */
int vt_dataset_subset(vt_dataset *ds, int k, vt_err *e);

/* Frees the arrays and zeroes ds (a zeroed ds is fine). */
void vt_dataset_free(vt_dataset *ds);

/* Name of Fashion-MNIST class c ("T-shirt/top", ..., "Ankle boot"), or "?" when out of range. */
const char *vt_fmnist_class_name(int c);

#endif
