/* Mixup / CutMix on a batch with soft targets, as timm's `Mixup` in mode 'batch' (timm/data/mixup.py). */
#ifndef VITC_MIXUP_H
#define VITC_MIXUP_H

#include <stdint.h>

#include "vitc/error.h"
#include "vitc/rng.h"

/* Settings (timm's Mixup arguments). */
typedef struct vt_mixup {
    double mixup_alpha;  /* Beta(a, a) of Mixup's lam (0: no Mixup) */
    double cutmix_alpha; /* Beta(a, a) of CutMix's lam (0: no CutMix) */
    double prob;         /* probability that a batch is mixed at all */
    double switch_prob;  /* with both alphas > 0: probability of CutMix instead of Mixup */
    double smoothing;    /* label smoothing of the one-hot targets before mixing */
    int correct_lam;     /* 1: CutMix's lam = 1 - box area / image area after clipping (timm's correct_lam) */
    int num_classes;
    int roll;            /* partners: 0 timm's flip (image b with B-1-b), 1 torchvision's roll (b with b-1 mod B) */
} vt_mixup;

/* One batch's random draws. */
typedef struct vt_mixup_draw {
    double lam;  /* Beta draw, before CutMix's area correction; 1: the batch is not mixed */
    int cutmix;  /* 1: CutMix, 0: Mixup */
    int cy, cx;  /* CutMix: box centre (uniform over rows / columns) */
} vt_mixup_draw;

/* timm/DeiT's defaults: mixup 0.8, cutmix 1.0, prob 1, switch 0.5, smoothing 0.1, correct_lam 1. */
vt_mixup vt_mixup_timm(int num_classes);

/* 1 when m mixes anything (an alpha > 0 and prob > 0). */
int vt_mixup_enabled(const vt_mixup *m);

/* Draws one batch's parameters for H×W images in timm's order: u ~ U(0,1) (mixed iff u < prob; nothing more is
 * drawn otherwise); with both alphas > 0, s ~ U(0,1) (CutMix iff s < switch_prob); lam ~ Beta(alpha, alpha) of the
 * chosen mode; for CutMix with lam < 1, cy ~ U{0..H-1} then cx ~ U{0..W-1} (timm's rand_bbox). */
void vt_mixup_sample(const vt_mixup *m, int H, int W, vt_rng *rng, vt_mixup_draw *d);

/* Applies draw d to x (B, C, H, W) in place (timm's _mix_batch; with m->roll torchvision's RandomMixup / RandomCutmix,
 * the same box and lam, each image's partner the one before it) and writes targets (B, num_classes): smoothed one-hots
 * mixed with the partners', lam·y + (1-lam)·y_partner (mixup_target); *lam_out (may be NULL) gets the lam used
 * (CutMix's corrected to the box area). Errors: odd B (timm needs pairs), a label outside [0, K), bad settings, no
 * memory for the one image roll keeps. */
int vt_mixup_apply(const vt_mixup *m, const vt_mixup_draw *d, float *x, int B, int C, int H, int W, const int *labels,
                   float *targets, double *lam_out, vt_err *e);

/* The seed of the draws of a run's micro-batch `batch` (counted from the run's start) on rank `rank`: each rank draws
 * its own, as DeiT's main.py seeds each rank with seed + rank, and a resumed run draws what an uninterrupted one would. */
uint64_t vt_mixup_key(uint64_t seed, int64_t batch, int rank);

/* vt_mixup_sample from a generator seeded with key (vt_mixup_key), then vt_mixup_apply: one batch's Mixup/CutMix. */
int vt_mixup_batch(const vt_mixup *m, float *x, int B, int C, int H, int W, const int *labels, float *targets,
                   uint64_t key, double *lam_out, vt_err *e);

#endif
