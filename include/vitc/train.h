/* Whole-model tasks over a configured model: gradients, evaluation, the training loop and benchmarks. */
#ifndef VITC_TRAIN_H
#define VITC_TRAIN_H

#include <signal.h> /* sig_atomic_t */
#include <stdint.h>
#include <stdio.h>

#include "vitc/augment.h"
#include "vitc/dataset.h"
#include "vitc/gemm.h"
#include "vitc/imagefolder.h"
#include "vitc/loader.h"
#include "vitc/mixup.h"
#include "vitc/model.h"

struct vt_recipe;

/* Loss and parameter gradients of c's training form on one batch (train mode, no dropout or drop-path). With steps > 1,
 * runs that many forward and backward passes on the batch with an AdamW step between two (steps - 1 updates; betas
 * 0.9/0.999, eps 1e-8, constant lr, weight decay wd except no_decay params), writing each pass's loss into
 * losses[0..steps); gradients left in P are those of the last pass. Labels must be class
 * indices (integers in [0, num_classes)). */
int vt_grad_steps(const vt_model_cfg *c, vt_params *P, const float *x, const float *labels, int B, int steps,
                  double lr, double wd, float *losses, vt_err *e);

/* Gradients of the mean loss over `accum` micro-batches of B (x: accum·B inputs, labels: accum·B) accumulated as
 * vt_train does with accum_steps (train mode, no drop-path): the same as one vt_grad_steps batch of accum·B for a
 * model without BatchNorm, up to rounding. *loss gets the mean of the micro-batch losses. */
int vt_grad_accum(const vt_model_cfg *c, vt_params *P, const float *x, const float *labels, int B, int accum,
                  float *loss, vt_err *e);

/* A training/evaluation data set for one model: Fashion-MNIST in memory or an image folder read on demand, as
 * sample sources with their transforms (training: crop + flip, or a folder's DeiT transform; eval: the model's
 * pretrained eval transform). */
typedef struct vt_data {
    int folder;                    /* 1: an image folder, 0: Fashion-MNIST */
    vt_dataset fm_train, fm_val;   /* Fashion-MNIST */
    vt_imagefolder f_train, f_val; /* image folder */
    vt_source train, val;
    vt_crop_flip crop;             /* the training transform's settings (crop + flip) */
    vt_tf_params deit;             /* ... or the DeiT train transform's, when deit_on */
    int deit_on;
    vt_preprocess pre;             /* the eval transform's settings */
    vt_transform train_tf, eval_tf;
} vt_data; /* the sources and transforms point into the struct: do not move it once opened */

/* Opens `data` ("fashion-mnist" or an image folder DIR with train/ and val/) for model c: checks that its classes and
 * channels fit c (a folder's images are converted to c's channels and sized by the transforms); train_subset /
 * val_subset > 0 keep N samples (Fashion-MNIST's first N; a folder's N spread evenly over its class-ordered files);
 * augment 0: the training transform is the eval transform; deit (NULL: none): a folder's training transform is
 * vt_transform_deit of these knobs (mean, std and fill set from c's preprocessing; Fashion-MNIST keeps crop + flip).
 * With train 0, the training split is not loaded (Fashion-MNIST) or not needed (eval). */
int vt_data_open(const vt_model_cfg *c, const char *data, int train, int augment, const vt_tf_params *deit,
                 int train_subset, int val_subset, vt_data *d, vt_err *e);

/* vt_data_open for evaluation; with class names (e.g. a run's classes.json: nclasses, the model's outputs) an image
 * folder needs only val/, whose class folders are scored by name against them (no train/ scanned). */
int vt_data_open_eval(const vt_model_cfg *c, const char *data, char *const *classes, int nclasses, int val_subset,
                      vt_data *d, vt_err *e);

/* Frees what vt_data_open loaded (a zeroed d is fine). */
void vt_data_close(vt_data *d);

/* Evaluation results: mean loss, top-1 and top-5 accuracy over the readable images; unreadable ones skipped. */
typedef struct vt_eval_result {
    double loss, acc1, acc5;
    int n;           /* images scored */
    int64_t skipped; /* unreadable images left out */
    int *top1;       /* set by the caller, or NULL: gets each image's top-1 class in source order (-1: unreadable) */
    int linears, int8_linears; /* the graph's linear layers, and those that ran the int8 kernel */
    long long bf16_runs;       /* products run in bf16 (--dtype bf16; on this rank) */
} vt_eval_result;

/* Evaluates the model (eval mode) on src through tf in batches of `batch` with `workers` loader threads (0: the
 * default), or with `loader` when not NULL (made by the caller for src, tf and batch with VT_BAD_DROP, reused across
 * evaluations so an unreadable image is warned about once; the loader made here warns on stderr, a caller's where
 * vt_loader_set_warnings says); progress on the stream `progress` (NULL: none) when
 * there is more than one batch. An image scored whose logits are not finite is an error naming it, the class and
 * the value (the loss and accuracy would be meaningless). */
int vt_evaluate(const vt_model_cfg *c, vt_params *P, const vt_source *src, const vt_transform *tf, int batch,
                int workers, vt_loader *loader, vt_eval_result *r, FILE *progress, vt_err *e);

/* Most epochs a run may have (--epochs' limit); a checkpoint past it is not one vitc wrote. */
#define VT_EPOCHS_MAX 1000000

/* What vt_train shares with a signal handler that asks a run to stop: `training` is 1 while the run trains (vt_train
 * sets it: before, nothing is lost when a handler ends the process at once), `asked` the handler's request. */
typedef struct vt_stop {
    volatile sig_atomic_t asked, training;
} vt_stop;

/* Options of vt_train. */
typedef struct vt_train_opts {
    const char *data;          /* "fashion-mnist" or an image folder (DIR/train/<class>/..., DIR/val/<class>/...) */
    int data_recorded;         /* 1: data is the path a resumed checkpoint records (named when it cannot be read) */
    const char *run_dir;       /* output folder (created) */
    const char *resume;        /* run folder to resume from, or NULL */
    const char *command_line;  /* recorded in run_dir/command.txt, after the resumed run's command lines */
    const char *notice;        /* printed (rank 0) once the data and the model have passed their checks, before the
                                  first epoch (the CLI's note on a warm-up longer than the run); not when a resumed
                                  run has nothing left to train; NULL: none */
    const char *model_options; /* the options that configured the model (the CLI's text, e.g. "--img-size 64"),
                                  recorded in checkpoints as "model-options" for a resume to take; NULL: none */
    int epochs, batch;         /* epochs: the cosine's length (timm's epochs); the run trains epochs + cooldown_epochs */
    double lr, min_lr, warmup_lr, weight_decay, warmup_epochs, smoothing, clip_grad;
    int cooldown_epochs;       /* epochs trained at min_lr after the cosine (timm's cooldown_epochs; 0: none) */
    int sched_update;          /* when the learning rate changes (vt_sched_update: every step, or per epoch) */
    int warmup_prefix;         /* 1: the cosine starts after the warm-up (vt_sched.warmup_prefix) */
    uint64_t seed;
    int train_subset, test_subset; /* 0: whole split */
    int augment;               /* 1: the training transform (crop + flip, or a folder's DeiT transform); 0: eval's */
    int log_every;             /* progress line every this many batches (micro-batches with accum_steps > 1) */
    int64_t fault_nan_step;    /* testing aid: poison the input of this step (0-based) with NaN (-1: off; with
                                * several ranks, on the last one only) */
    int64_t fault_batch_step;  /* testing aid: the batch of this step (0-based) fails as a loader error would (-1:
                                * off; with several ranks, on the last one only: the others must stop, not wait) */
    int64_t fault_grad_step;   /* testing aid: after the backward of this optimiser step (0-based), the first gradient
                                * element of the first trained parameter becomes 1e30, too large for AdamW's squared
                                * average (-1: off; with several ranks, on every rank, after the gradients' sum) */
    int64_t fault_stop_step;   /* testing aid: a stop is asked (as by o->stop) during this optimiser step (0-based),
                                * which ends the run at its end (-1: off; with several ranks, on the last one only) */
    int64_t fault_nan_eval;    /* testing aid: make the first output logit of this epoch's (0-based) validation NaN, in
                                * the EMA's evaluation when there is an EMA (-1: off; with several ranks, on the last
                                * one only) */
    int overwrite;             /* 1: a fresh run may replace the history (checkpoint, metrics) in run_dir */
    vt_mixup mixup;            /* Mixup/CutMix of each (micro-)batch when enabled (vt_mixup_enabled): soft targets
                                  smoothed by `smoothing`, soft-target cross-entropy; num_classes from the model */
    int model_ema;             /* 1: keep a model EMA (timm ModelEmaV2), evaluated each epoch, in the checkpoint and
                                  saved as weights_ema.safetensors */
    double model_ema_decay;
    int accum_steps;           /* micro-batches of `batch` per optimiser step (1: none); schedule in optimiser steps */
    int repeated_aug;          /* > 0: DeiT's RASampler with this many repeats (vt_ra_sample); 0: a plain shuffle */
    int sync_bn;               /* 1: with several ranks, BatchNorms normalise over every rank's batch (torch's
                                * SyncBatchNorm, vt_graph.allsum); 0: each rank's own (DDP's plain BatchNorm) */
    const char *init_from;     /* weights to fine-tune from (vt_adapt_load: head re-initialised, position tables
                                  resized when needed), or NULL */
    const struct vt_recipe *recipe; /* settings printed at the start and saved as run_dir/recipe.json (NULL: none);
                                       its per-image augmentation (RandAugment, RandomErasing, RandomResizedCrop)
                                       becomes an image folder's training transform */
    int workers;               /* input pipeline threads (0: vt_loader_default_workers()) */
    struct vt_dist *dist;      /* data-parallel ranks (vitc/dist.h; batch is per rank); NULL: this process alone */
    FILE *log;                 /* rank 0's progress, notes and per-epoch lines (default stdout; NULL: none) */
    FILE *warn;                /* warnings: unreadable images skipped, a curves picture not drawn, a killed run's
                                  temporary files removed (default stderr; NULL: none) */
    struct vt_stop *stop;      /* a signal handler's flags (NULL: none): once stop->asked reads non-zero (on any
                                * rank), the run stops at the end of its optimiser step, writes the checkpoint of
                                * that point (mid-epoch; a resume goes on from there) and vt_train returns 1 */
} vt_train_opts;

/* Fills o with the defaults (AdamW lr 1e-3, wd 0.05, 1 warm-up epoch, label smoothing 0.1, batch 128, 10 epochs; no
 * Mixup/CutMix, no EMA (decay 0.99996 when turned on), no accumulation; lines on stdout, warnings on stderr). */
void vt_train_defaults(vt_train_opts *o);

/* Trains c's training form on the dataset: progress lines, per-epoch evaluation, metrics.csv, curves.png, atomic
 * checkpoints (weights, optimizer state, step, RNG, the run's settings) in run_dir/checkpoint.safetensors, the best
 * validation top-1's weights in run_dir/weights_best.safetensors; stops on a non-finite loss, and on a validation
 * (of the weights or their EMA) whose logits are not finite before anything of that epoch is written. run_dir is
 * locked for the run; a folder holding another run is refused unless resumed or o->overwrite; a resume whose settings
 * change an epoch's optimiser steps is refused, other changes are named in a note. With o->dist of N > 1 ranks: each
 * rank trains on its shard of every epoch, gradients are averaged, rank 0 alone prints and writes. Returns 0 when the
 * run has trained its epochs, 1 when o->stop stopped it (its checkpoint written), -1 on error. */
int vt_train(const vt_model_cfg *c, const vt_train_opts *o, vt_err *e);

/* Result of vt_bench. */
typedef struct vt_bench_result {
    double img_per_s, ms_per_iter, sgemm_gflops, arena_mib;
    double ms_best_iter;                 /* the fastest timed iteration (on a shared machine the least disturbed:
                                          * steadier than the mean for comparing two runs) */
    double gmacs_per_img;                /* the model's multiply-adds per image (every token, as its summary) */
    double gmacs_run_per_img;            /* those its forward runs per image: fewer where a class-token ViT's last
                                          * block computes the class token's row alone */
    double gflops;                       /* achieved: 2 × the multiply-adds a step ran, per second (the forward's, or
                                          * forward and backward's, vt_graph_train_macs) */
    double peak_rss_mib;                 /* the model's peak resident memory (getrusage), without the sgemm probes' */
    double weight_copies_mib;            /* weight copies the graph's kernels made (vt_gemm_weight_copy_bytes:
                                          * packed, bf16, int8; none with --no-prepack but int8's) */
    double sgemm_openblas, sgemm_onednn; /* each library's 1024³ sgemm GFLOP/s; sgemm_gflops is the better one */
    double bf16_gflops;                  /* a bf16 graph's (--dtype bf16): a 1024³ product as its GEMMs run it
                                          * (vt_gemm on a bf16 plan: inputs converted, oneDNN bf16 matmul); else 0 */
    double int8_gflops;                  /* an int8 graph's (--dtype int8): a 1024³ int8 linear layer as its layers
                                          * run (input quantised each run, weight once); 0 without, or where the
                                          * int8 kernel would not be faster */
    int64_t params;                      /* parameters of the model benchmarked (the training form with train) */
    vt_machine machine;                  /* CPU model and ISA, the kernels of both GEMM libraries */
    vt_gemm_plan gemm;                   /* the graph's GEMM dispatch (see vt_gemm_rule) */
    int linears, int8_linears;           /* the graph's linear layers, and those on the int8 kernel (--dtype int8) */
    long long bf16_runs;                 /* products run in bf16 (--dtype bf16) */
    double by_kind[VT_OP_KINDS];         /* with profile: the timed steps' fractions by op kind
                                          * (vt_graph_profile_split); zeros without */
    double fused_gemm;                   /* with profile: the fraction in the fused ops' GEMM calls (part of
                                          * by_kind[VT_OP_FUSED]; vt_graph_profile_fused_gemm) */
    double other_cpus, steal_cpus;       /* during the timed steps, CPUs' worth of time other processes ran (the
                                          * machine's busy time less this process's) and the hypervisor stole
                                          * (Linux's /proc/stat, to a quarter CPU); -1 where unknown or where the
                                          * steps were too short for its clock ticks */
} vt_bench_result;

/* Times forward (or forward+backward+AdamW of the training form when train) on random data after warm-up; measures
 * the sgemm peak of each GEMM library too. With a profile stream (NULL: no profile), times every node and prints the
 * time per op type there (vt_graph_print_profile); progress on the stream `progress` (NULL: none). */
int vt_bench(const vt_model_cfg *c, int batch, int train, int iters, FILE *profile, FILE *progress, vt_bench_result *r,
             vt_err *e);

/* Images per second of d's training input pipeline alone (read, decode, crop + flip into batches of `batch` with
 * `workers` threads), over `batches` batches (as many passes over the training set as that takes). */
int vt_bench_input(const vt_data *d, int batch, int workers, int batches, double *img_per_s, vt_err *e);

#endif
