/* What the fault-injection tests (tests/faults/) share: a small image folder to train on, and silencing the trainer. */
#ifndef VITC_TEST_FAULTS_H
#define VITC_TEST_FAULTS_H

#include "vitc/model.h"
#include "vitc/train.h"

/* Writes DIR/train/{a,b}/ (4 + 4 PNGs) and DIR/val/{a,b}/ (2 + 2), 28×28 grey, under dir/data into data (n bytes);
 * 0, or -1 when a file could not be written. */
int vt_faults_folder(const char *dir, char *data, size_t n);

/* Configures c as vit_fmnist_tiny with 2 classes and o as one epoch of it on data with batch 4, into run (replacing a
 * run there), 2 loader threads; 0, or -1 with e set. */
int vt_faults_run(const char *data, const char *run, vt_model_cfg *c, vt_train_opts *o, vt_err *e);

/* on: stdout and stderr to /dev/null (the trainer's progress lines), saved holds the two descriptors; off: back. */
void vt_faults_quiet(int on, int saved[2]);

#endif
