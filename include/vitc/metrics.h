/* Training metrics: one CSV row per evaluation in RUN_DIR/metrics.csv, and a PNG of the curves via gnuplot. */
#ifndef VITC_METRICS_H
#define VITC_METRICS_H

#include <stdint.h>

#include "vitc/error.h"

/* First line of metrics.csv. */
#define VT_METRICS_HEADER "epoch,step,train_loss,train_acc,test_loss,test_acc,lr,img_per_s,seconds,test_acc5"
/* The header before test_acc5: such a file is rewritten with the new header (an empty test_acc5) when appended to. */
#define VT_METRICS_HEADER_V1 "epoch,step,train_loss,train_acc,test_loss,test_acc,lr,img_per_s,seconds"

/* One row; NaN values are written as empty fields (e.g. no test evaluation on this row). */
typedef struct vt_metrics_row {
    double epoch;                 /* may be fractional for rows written inside an epoch */
    int64_t step;                 /* optimiser steps done */
    double train_loss, train_acc; /* accuracies are fractions in [0, 1] */
    double test_loss, test_acc;
    double lr, img_per_s, seconds; /* seconds: wall time since the start of the run */
    double test_acc5;              /* top-5 accuracy */
} vt_metrics_row;

/* Appends r to run_dir/metrics.csv, writing the header first when the file is new or empty; fails when an
 * existing file has a different header. */
int vt_metrics_append(const char *run_dir, const vt_metrics_row *r, vt_err *e);

/* Drops the rows of run_dir/metrics.csv whose epoch exceeds max_epoch (rewriting it atomically; a file with none
 * and the current header is left as it is), so a run that starts or resumes at max_epoch does not repeat rows of
 * epochs it will train again; no file is not an error. */
int vt_metrics_truncate(const char *run_dir, double max_epoch, vt_err *e);

/* Writes run_dir/metrics.csv (atomically) with the rows of from_dir/metrics.csv whose epoch is at most max_epoch: a run
 * resumed from another folder carries its history there (no file in from_dir: none in run_dir either). */
int vt_metrics_copy(const char *from_dir, const char *run_dir, double max_epoch, vt_err *e);

/* The `seconds` of the last row of run_dir/metrics.csv (0 when there is none): where a resumed run's clock goes on. */
double vt_metrics_last_seconds(const char *run_dir);

/* Writes run_dir/curves.gp from run_dir/metrics.csv and runs gnuplot on it to make run_dir/curves.png (loss and
 * accuracy vs epoch, train and test). Fails with a clear message when gnuplot is missing or fails; callers should
 * only warn, training does not depend on it. */
int vt_plot_curves(const char *run_dir, vt_err *e);

#endif
