/* Learning-rate schedule: linear warm-up then cosine decay (timm's CosineLRScheduler), updated every optimiser step
 * (the Swin code base) or once per epoch (DeiT's main.py, timm's train.py, torchvision's train.py). */
#ifndef VITC_SCHEDULE_H
#define VITC_SCHEDULE_H

#include <stdint.h>

/* When the learning rate changes. */
typedef enum {
    VT_SCHED_STEP = 0,   /* every optimiser step (Swin's main.py: step_update per iteration) */
    VT_SCHED_EPOCH = 1,  /* at each epoch's start: epoch e trains at the schedule's value for e (timm's train.py,
                          * torchvision's train.py: step(e + 1) after epoch e) */
    VT_SCHED_DEIT = 2    /* DeiT's main.py: step(e) after epoch e, so epoch e trains at the value for e - 1 (epochs 0
                          * and 1 both at the first) */
} vt_sched_update;

/* Cosine schedule settings, all counted in optimiser steps. */
typedef struct vt_sched {
    double base_lr;        /* peak learning rate */
    double warmup_lr;      /* learning rate at step 0 of the warm-up (timm's warmup_lr_init) */
    double min_lr;         /* floor reached at the end of the cosine (timm's lr_min) */
    int64_t warmup_steps;  /* warm-up length (0: none) */
    int64_t total_steps;   /* cosine length (timm's t_initial), usually the whole run */
    int warmup_prefix;     /* 0 (timm default): the cosine is measured from step 0 and the warm-up replaces its
                              start; 1: the cosine starts after the warm-up (torchvision's SequentialLR, with
                              total_steps the cosine's own length) */
    int64_t epoch_steps;   /* optimiser steps per epoch (used by the per-epoch updates) */
    vt_sched_update update;
} vt_sched;

/* Learning rate at optimiser step `step` (0-based): warmup_lr + t*(base_lr-warmup_lr)/warmup_steps during the
 * warm-up, then min_lr + (base_lr-min_lr)*(1+cos(pi*t/total_steps))/2, and min_lr from t >= total_steps on, where
 * t is the step, or with a per-epoch update the first step of the epoch whose value applies. */
double vt_sched_lr(const vt_sched *s, int64_t step);

#endif
