/* What the training loop's files share: trainer.c (gradients, evaluation, vt_train), rundir.c (checkpoints and the
 * run folder) and data.c (the data sets). Each function's details: the comment on its definition. */
#ifndef VITC_TRAINER_H
#define VITC_TRAINER_H

#include <limits.h>
#include <stdint.h>

#include "vitc/optim.h"
#include "vitc/train.h"

/* ---- checkpoints and the run folder (rundir.c) */

/* A run's position (step, epoch; within an epoch for a run stopped there) and record (its best epoch), as its
 * checkpoints store them. Nothing random needs storing: the data order, the transforms, Mixup/CutMix and drop-path
 * draw from keys of (seed, epoch or step, ...). */
typedef struct {
    int64_t step, epoch;
    int64_t best_epoch; /* the epoch (0-based, as the Test lines) whose weights are weights_best.safetensors; -1: none */
    double best_acc1;   /* its validation top-1 */
    int64_t images;     /* this run's training images (recorded as train-images; not read from checkpoints) */
    uint64_t files;     /* an image folder run's digest of those images' names and classes (train-files); 0: none */
    /* a run stopped mid-epoch (vt_train_opts.stop): the part of epoch `epoch` its checkpoint holds; all 0 otherwise */
    int64_t part_steps;   /* its optimiser steps (step counts them too), fewer than an epoch's */
    int64_t part_correct; /* the training images they classified right (all ranks) */
    int64_t part_skipped; /* the unreadable training images they skipped (all ranks) */
    double part_loss;     /* the sum of their micro-batches' losses */
    double part_seconds;  /* their training time */
} train_state;

/* A setting of the run recorded in its checkpoints' metadata under its option's name, so that a resume can say what
 * it changes; `steps` marks those that set an epoch's optimiser steps (a change there breaks the schedule). */
typedef struct {
    const char *key, *str; /* str: a text value; NULL: the number in num */
    char num[32];
    int steps;
} run_setting;

/* Room for run_settings' settings. */
enum { RUN_SETTINGS = 30 };

/* The settings of run o of model c (the training form) over `images` training images, into s (RUN_SETTINGS of
 * them); returns their count. */
int run_settings(const vt_model_cfg *c, const vt_train_opts *o, int64_t images, run_setting *s);

/* A setting's value as recorded. */
static inline const char *setting_value(const run_setting *s) { return s->str ? s->str : s->num; }

/* The epochs run o trains: its cosine's, then its cooldown's (at the final learning rate). */
static inline int run_epochs(const vt_train_opts *o) {
    const int64_t n = (int64_t)o->epochs + (o->cooldown_epochs > 0 ? o->cooldown_epochs : 0);
    return n > INT_MAX ? INT_MAX : (int)n;
}

/* Writes the checkpoint of run o at st to path: the model, its EMA (ema: NULL for none), the optimiser state, the
 * step and epoch, and the run's metadata (world_size: the rank count). */
int save_checkpoint(const char *path, const vt_model_cfg *c, const vt_train_opts *o, vt_params *P,
                    const vt_adamw *opt, const vt_params *ema, const train_state *st, int world_size, vt_err *e);
/* Restores the checkpoint of o->resume into P, opt, ema (may be NULL) and st once it fits this run: its rank count
 * (ranks), the epochs left, spe optimiser steps an epoch and its settings. */
int resume_run(const vt_model_cfg *c, const vt_train_opts *o, vt_params *P, vt_adamw *opt, vt_params *ema,
               train_state *st, int ranks, int64_t spe, vt_err *e);
/* A resumed image-folder run: refuses classes f other than those of RUN/classes.json (run: the resumed folder). */
int check_classes(const char *run, const vt_imagefolder *f, const char *data, vt_err *e);
/* Whether paths a and b name the same existing folder. */
int same_dir(const char *a, const char *b);
/* Refuses a run folder holding another run's checkpoint, metrics, weights or curves (unless --overwrite), and a --resume
 * checkpoint of another model. */
int check_run_dir(const vt_model_cfg *c, const vt_train_opts *o, vt_err *e);
/* Refuses a run folder inside the image folder data's train/ or val/ (or one of them). */
int out_inside_data(const char *run_dir, const char *data, vt_err *e);
/* Creates dir and its missing parents (like mkdir -p). */
int make_dirs(const char *dir, vt_err *e);
/* Takes the run folder's lock (RUN/.lock, held until the process ends); the descriptor that keeps it, or -1 when
 * another process holds it. */
int lock_run(const char *dir, vt_err *e);
/* Under the run folder's lock: removes the temporary files of a killed run's unfinished writes (says how many on
 * warn; NULL: not); 0. */
int stale_temps(const char *dir, FILE *warn);
/* Removes from dir the files of an earlier run (checkpoint, weights, metrics, curves, recipe, classes, commands). */
int clear_run_dir(const char *dir, vt_err *e);
/* Writes o->command_line to path (RUN/command.txt) after the command lines of the run resumed. */
int command_record(const vt_train_opts *o, const char *path, vt_err *e);

/* ---- the data sets (data.c) */

/* Refuses an image folder none of whose training, or none of whose validation, images can be read (0 for
 * Fashion-MNIST). */
int check_readable(const vt_data *d, int chans, const char *data, vt_err *e);

#endif
