/* Named training recipes (`vitc train --recipe NAME`): the papers' hyper-parameters as defaults that explicit CLI
 * options override, printed at the start of a run and saved with it (RUN/recipe.json). */
#ifndef VITC_RECIPE_H
#define VITC_RECIPE_H

#include <stdio.h>

#include "vitc/error.h"
#include "vitc/mixup.h"
#include "vitc/tensor.h"
#include "vitc/transforms.h"

struct vt_train_opts;

/* Every setting of a recipe (resolved: a preset, then the user's overrides). */
typedef struct vt_recipe {
    char name[32];
    const char *source;          /* where the values come from (paper / spec section / official code) */
    const char *notes;           /* what vitc does not reproduce (NULL: nothing) */
    /* optimiser and schedule (AdamW, warm-up then cosine; counted in optimiser steps) */
    double lr;                   /* peak learning rate for a global batch of lr_base_batch (see vt_recipe_lr) */
    int lr_base_batch;           /* 0: lr is used as given; else lr · batch · accum_steps / lr_base_batch */
    int lr_given;                /* 1: lr came from --lr and is used as given (no scaling) */
    int scale_warmup_min_lr;     /* 1: warmup_lr and min_lr are scaled like lr (Swin's main.py), unless given */
    int warmup_lr_given, min_lr_given; /* 1: from --warmup-lr / --min-lr, used as given (no scaling) */
    double weight_decay, warmup_lr, min_lr, warmup_epochs, clip_grad, smoothing;
    int epochs, batch, accum_steps;
    int cooldown_epochs;         /* trained at min_lr after the cosine of `epochs` (timm's cooldown_epochs) */
    int sched_update;            /* vt_sched_update: the official code's lr update, every step or once per epoch */
    int warmup_prefix;           /* 1: the cosine starts after the warm-up (torchvision's SequentialLR) */
    double warmup_lr_rel;        /* > 0: the warm-up starts at this share of the peak lr (torchvision's LinearLR
                                    start_factor), unless --warmup-lr is given; 0: at warmup_lr */
    int world_size;              /* data-parallel ranks (0 or 1: one process); batch is per rank, as DeiT's */
    double drop_path;            /* < 0: the model's own rate */
    /* batch mixing and weight averaging */
    vt_mixup mixup;              /* num_classes and smoothing are filled from the model and `smoothing` */
    int model_ema;
    double model_ema_decay;
    int repeated_aug;            /* 1: DeiT's RASampler, 3 repeats (vt_ra_sample) */
    int sync_bn;                 /* 1: BatchNorm statistics over every rank's batch (torch's SyncBatchNorm) */
    int decay_all;               /* 1: weight decay on every parameter, the model's no-decay list ignored
                                  * (torchvision's train.py without --norm-weight-decay); 0: norms, biases and the
                                  * family's list skipped */
    /* per-image augmentation (timm create_transform names), plain fields for the transforms code */
    char aa[64];                 /* RandAugment / AutoAugment string, "" for none */
    double reprob;               /* RandomErasing probability */
    char remode[16];             /* RandomErasing mode ("pixel", "rand", "const") */
    int recount;
    char interpolation[16];      /* train resize filter */
    double scale[2], ratio[2];   /* RandomResizedCrop */
    double hflip, color_jitter;  /* color_jitter applies only without aa (timm) */
} vt_recipe;

/* Number of named recipes, and the i-th's name (NULL out of range). */
int vt_recipe_count(void);
const char *vt_recipe_name(int i);

/* Fills r with the named preset ("default" is vitc's plain defaults) for the given model name (presets with a
 * rate per model size, e.g. GroupMixFormer's drop-path, read it; NULL: the model's own); an unknown name is an error
 * listing the names. */
int vt_recipe_get(const char *name, const char *model, vt_recipe *r, vt_err *e);

/* The peak learning rate r trains with: lr, times the global batch (batch · accum_steps · world_size) /
 * lr_base_batch when the recipe scales it and --lr did not set it. */
double vt_recipe_lr(const vt_recipe *r);

/* Copies r's optimiser, schedule, mixing and EMA settings into o (vt_train's options), warmup_lr and min_lr scaled
 * like the lr where the recipe scales them and they were not given; o->recipe = r. */
void vt_recipe_apply(const vt_recipe *r, struct vt_train_opts *o);

/* The per-image train transform of r at size×size (vt_tf_deit with r's crop, flip, interpolation, RandomErasing and
 * its `aa` parsed as timm's rand_augment_transform: "rand-m9-mstd0.5-inc1", n = ops, m = magnitude, mstd, p = op
 * probability; "" = none); mean, std and fill stay ImageNet's for the caller to set from the model. Errors: an aa
 * that is not RandAugment with increasing ops, a RandomErasing mode other than pixel. */
int vt_recipe_transforms(const vt_recipe *r, int size, vt_tf_params *p, vt_err *e);

/* The weight decay of r on P's parameters: with r->decay_all every no_decay flag cleared (the MSF script decays all of
 * them), else P's own flags (the family's list) kept. Returns 0. */
int vt_recipe_decay(const vt_recipe *r, vt_params *P);

/* Prints every setting, one "  key: value" line each, under a header naming the recipe and its source. */
void vt_recipe_print(const vt_recipe *r, FILE *f);

/* Writes every setting as one JSON object to path atomically. */
int vt_recipe_save(const vt_recipe *r, const char *path, vt_err *e);

#endif
