/* The input pipeline: a sample source (sample i as a uint8 image + label), a per-sample transform (uint8 image ->
 * normalised float CHW, with that sample's own random draws) and a batch loader whose worker threads decode and
 * transform samples into a bounded queue of batches.
 *
 * Determinism: a batch's contents never depend on thread timing. Every random draw of sample i's transform in epoch
 * t comes from an RNG seeded by vt_rng_key(seed, t, i), so the same image gets the same augmentation whichever
 * thread (or MPI rank) processes it, and batch k holds positions [k·B, (k+1)·B) of the index list the caller gives. */
#ifndef VITC_LOADER_H
#define VITC_LOADER_H

#include <stdint.h>
#include <stdio.h>

#include "vitc/dataset.h"
#include "vitc/image.h"
#include "vitc/rng.h"

/* A dataset seen one sample at a time. get() must be callable from several threads at once. */
typedef struct vt_source {
    int n;        /* samples */
    int nclasses; /* every label is < nclasses */
    /* Sample i as a new image of `chans` channels (free with vt_image_free) and its label; min_side > 0 lets a
     * decoder downscale while both sides stay >= min_side. An unreadable/corrupt sample is an error (-1). */
    int (*get)(void *ctx, int i, int chans, int min_side, vt_image *img, int *label, vt_err *e);
    /* Sample i's name for messages (a file path), or NULL. */
    const char *(*name)(void *ctx, int i);
    void *ctx;
} vt_source;

/* A per-sample transform: img (chans channels) -> out (chans, size, size) floats, random draws from rng (NULL for a
 * transform that draws none). A small struct of function pointer + context, so new transforms plug in. */
typedef struct vt_transform {
    int (*apply)(const void *ctx, const vt_image *img, vt_rng *rng, float *out, vt_err *e);
    const void *ctx;
    int size, chans; /* output geometry: chans × size × width */
    int min_side;    /* decode hint for the source: the smallest image side the transform needs (0: full size) */
    int width;
} vt_transform;

/* Transforms and the in-memory source: include/vitc/augment.h (src/train/augment.c); image folders:
 * include/vitc/imagefolder.h. */

/* What the loader does with an unreadable sample. */
typedef enum {
    VT_BAD_REPLACE, /* training: take the next readable dataset index after it (i+1, i+2, ... mod n) */
    VT_BAD_DROP     /* evaluation: leave the row out (its label is -1, its pixels zero) */
} vt_bad_policy;

typedef struct vt_loader vt_loader;

/* A loader of batches of `batch` samples of src through tf with `workers` threads (>= 1) and `prefetch` (>= 1)
 * batches ahead. src and tf must outlive it. */
vt_loader *vt_loader_new(const vt_source *src, const vt_transform *tf, int batch, int workers, int prefetch,
                         vt_bad_policy bad, vt_err *e);

/* Starts an epoch over idx[0..n) (copied): ceil(n / batch) batches, or floor with drop_last; per-sample random
 * draws keyed by (seed, epoch, dataset index). An epoch in progress is abandoned. Returns the batch count. */
int vt_loader_start(vt_loader *L, const int *idx, int n, int drop_last, uint64_t seed, int64_t epoch, vt_err *e);

/* vt_loader_start with the third key of each position's random draws given: keys[j] for idx[j] (keys NULL: the
 * dataset index), e.g. to give the repeats of an image in one epoch their own draws; a replacement for an unreadable
 * sample i' is keyed keys[j] + (i' - idx[j]). keys is copied. */
int vt_loader_start_keyed(vt_loader *L, const int *idx, const uint64_t *keys, int n, int drop_last, uint64_t seed,
                          int64_t epoch, vt_err *e);

/* Waits for the next batch of the epoch and copies it into x (batch, chans, size, size) and labels[batch] (rows
 * past a short last batch's end zeroed, their labels -1: a batch-wide int8 input range sees no stale image).
 * Returns the rows of the batch, 0 at the end of the epoch, -1 on an
 * error (a worker's, or every sample unreadable). */
int vt_loader_next(vt_loader *L, float *x, int *labels, vt_err *e);

/* Where the loader's warnings go (one line per unreadable or unusable sample, once per loader): stderr unless set
 * here; NULL silences them. */
void vt_loader_set_warnings(vt_loader *L, FILE *f);

/* Text put after "vitc: " in the warnings (an MPI rank's "rank 1: "; NULL or "": none). */
void vt_loader_set_tag(vt_loader *L, const char *tag);

/* Unreadable samples met in the current epoch (each warned about once per loader, naming it). */
int64_t vt_loader_skipped(vt_loader *L);

/* Stops the workers and frees the loader (NULL is fine). */
void vt_loader_free(vt_loader *L);

/* A sensible worker count for this process: the cores it may run on (vt_cpus_usable), at most 8. */
int vt_loader_default_workers(void);

#endif
