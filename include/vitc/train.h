/* Whole-model tasks over a configured model: gradients, evaluation, the training loop and benchmarks. */
#ifndef VITC_TRAIN_H
#define VITC_TRAIN_H

#include <stdint.h>
#include <stdio.h>

#include "vitc/dataset.h"
#include "vitc/gemm.h"
#include "vitc/model.h"

/* Loss and parameter gradients of c's training form on one batch (train mode, no dropout or drop-path). With steps > 1, runs that many AdamW steps
 * (betas 0.9/0.999, eps 1e-8, constant lr, weight decay wd except no_decay params) on the batch, writing the loss
 * before each step into losses[0..steps); gradients left in P are those of the last step. */
int vt_grad_steps(const vt_model_cfg *c, vt_params *P, const float *x, const float *labels, int B, int steps,
                  double lr, double wd, float *losses, vt_err *e);

/* Mean loss and accuracy of the model on ds (eval mode, no augmentation) in batches of `batch`; progress on the
 * stream `progress` (NULL: none) when there is more than one batch. */
int vt_evaluate(const vt_model_cfg *c, vt_params *P, const vt_dataset *ds, int batch, double *loss, double *acc,
                FILE *progress, vt_err *e);

/* Options of vt_train. */
typedef struct vt_train_opts {
    const char *data;          /* "fashion-mnist" */
    const char *run_dir;       /* output folder (created) */
    const char *resume;        /* run folder to resume from, or NULL */
    const char *command_line;  /* recorded in run_dir/command.txt */
    int epochs, batch;
    double lr, min_lr, warmup_lr, weight_decay, warmup_epochs, smoothing, clip_grad;
    uint64_t seed;
    int train_subset, test_subset; /* 0: whole split */
    int augment;               /* random crop (pad 4) + horizontal flip */
    int log_every;             /* progress line every this many steps */
    int64_t fault_nan_step;    /* testing aid: poison the input of this step (0-based) with NaN (-1: off; with
                                * several ranks, on the last one only) */
    int overwrite;             /* 1: a fresh run may replace the history (checkpoint, metrics) in run_dir */
    struct vt_dist *dist;      /* data-parallel ranks (vitc/dist.h; batch is per rank); NULL: this process alone */
} vt_train_opts;

/* Fills o with the defaults (AdamW lr 1e-3, wd 0.05, 1 warm-up epoch, label smoothing 0.1, batch 128, 10 epochs). */
void vt_train_defaults(vt_train_opts *o);

/* Trains c's training form on the dataset: progress lines, per-epoch evaluation, metrics.csv, curves.png, atomic checkpoints
 * (weights, optimizer state, step, RNG) in run_dir/checkpoint.safetensors; stops on a non-finite loss. run_dir is
 * locked for the run; a folder holding another run is refused unless resumed or o->overwrite. With o->dist of N > 1
 * ranks: each rank trains on its shard of every epoch, gradients are averaged, rank 0 alone prints and writes. */
int vt_train(const vt_model_cfg *c, const vt_train_opts *o, vt_err *e);

/* Result of vt_bench. */
typedef struct vt_bench_result {
    double img_per_s, ms_per_iter, gmacs_per_img, gflops, sgemm_gflops, arena_mib;
    double peak_rss_mib;                 /* the process's peak resident memory after the timed runs (getrusage) */
    double sgemm_openblas, sgemm_onednn; /* each library's 1024³ sgemm GFLOP/s; sgemm_gflops is the better one */
    int64_t params;                      /* parameters of the model benchmarked (the training form with train) */
    vt_machine machine;                  /* CPU model and ISA, the kernels of both GEMM libraries */
    vt_gemm_plan gemm;                   /* the graph's GEMM dispatch (see vt_gemm_rule) */
} vt_bench_result;

/* Times forward (or forward+backward+AdamW of the training form when train) on random data after warm-up; measures
 * the sgemm peak of each GEMM library too. With profile, prints the time per op type; progress on the stream
 * `progress` (NULL: none). */
int vt_bench(const vt_model_cfg *c, int batch, int train, int iters, int profile, FILE *progress, vt_bench_result *r,
             vt_err *e);

#endif
