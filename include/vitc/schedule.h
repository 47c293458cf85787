/* Learning-rate schedule: linear warm-up then cosine decay, per optimiser step (timm's CosineLRScheduler). */
#ifndef VITC_SCHEDULE_H
#define VITC_SCHEDULE_H

#include <stdint.h>

/* Cosine schedule settings, all counted in optimiser steps. */
typedef struct vt_sched {
    double base_lr;        /* peak learning rate */
    double warmup_lr;      /* learning rate at step 0 of the warm-up (timm's warmup_lr_init) */
    double min_lr;         /* floor reached at the end of the cosine (timm's lr_min) */
    int64_t warmup_steps;  /* warm-up length (0: none) */
    int64_t total_steps;   /* cosine length (timm's t_initial), usually the whole run */
    int warmup_prefix;     /* 0 (timm default): the cosine is measured from step 0 and the warm-up replaces its
                              start; 1: the cosine starts after the warm-up */
} vt_sched;

/* Learning rate at optimiser step `step` (0-based): warmup_lr + step*(base_lr-warmup_lr)/warmup_steps during the
 * warm-up, then min_lr + (base_lr-min_lr)*(1+cos(pi*t/total_steps))/2, and min_lr from t >= total_steps on. */
double vt_sched_lr(const vt_sched *s, int64_t step);

#endif
