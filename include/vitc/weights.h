/* Loading and saving a model's parameter store as safetensors, plus tensor-file helpers for the CLI. */
#ifndef VITC_WEIGHTS_H
#define VITC_WEIGHTS_H

#include <stdint.h>

#include "vitc/error.h"
#include "vitc/safetensors.h"
#include "vitc/tensor.h"

/* The safetensors __metadata__ key holding the form ("training" / "deployed") of a store with P->form set. */
#define VT_FORM_KEY "vitc_form"
/* ... and the one holding P->heads, the heads each stage runs (no tensor's shape shows them). */
#define VT_HEADS_KEY "vitc_heads"
/* ... and the one holding P->windows, each stage's attention window or stripe width. */
#define VT_WINDOWS_KEY "vitc_windows"
/* ... and the one holding P->attn, each stage's attention (vt_attn_record_name). */
#define VT_ATTN_KEY "vitc_attn"
/* ... and the ones holding P->model, the named model, and P->options, the options that changed it (the command line's
 * spelling): the commands that load weights build the model with the options it was saved with. */
#define VT_MODEL_KEY "vitc_model"
#define VT_OPTIONS_KEY "vitc_model_options"
/* ... and the one holding P->epoch, the training epoch (from 1) of a run's best weights. */
#define VT_EPOCH_KEY "vitc_epoch"
/* ... and the one saying "folder" when P->folder is set: weights trained on an image folder, whose classes are not
 * the model's dataset's (their names are in the run's classes.json). */
#define VT_DATA_KEY "vitc_data"

/* Refuses a file f (opened from path) recording other heads (VT_HEADS_KEY) than P runs; files without the record
 * (official checkpoints, converted files, older vitc files) pass. */
int vt_weights_check_heads(const vt_params *P, const vt_st_file *f, const char *path, vt_err *e);

/* Refuses a file f recording other windows or stripe widths (VT_WINDOWS_KEY) than P runs; files without the record
 * pass (fine-tuning at another width, --init-from, does not check it). */
int vt_weights_check_windows(const vt_params *P, const vt_st_file *f, const char *path, vt_err *e);

/* Refuses a file f recording other attention (VT_ATTN_KEY) than P runs, e.g. MSF's grouped projections in the
 * other channel order (msf_g2 against msf_g2_block, same shapes); files without the record pass. */
int vt_weights_check_attn(const vt_params *P, const vt_st_file *f, const char *path, vt_err *e);

/* 1 when name is a BatchNorm's running variance (PyTorch's `running_var`, which must not be negative). */
int vt_is_running_var(const char *name);

/* 1 when f holds re-parameterised branch tensors (a `.rep.` in a name): cFFN's training form. */
int vt_weights_has_branches(const vt_st_file *f);

/* 1 when `name` is a re-parameterised branch tensor (PREFIX.rep.…) whose merge, PREFIX.weight, f holds (the deployed
 * form of that block). */
int vt_weights_rep_merged_in(const char *name, const vt_st_file *f);

/* Loads every tensor of P from the safetensors file at path. The file must hold exactly P's names (but it may lack
 * fixed buffers, which keep their definition, and BatchNorm's num_batches_tracked, set to 0) with exactly P's shapes; dtypes F32/F16/BF16 (and I64 for is_i64 buffers); finite values; fixed buffers
 * (VT_INIT_FIXED) equal to P's; when P->form is set, the form the file records (none: training, or deployed for a cFFN model's file without
 * `.rep.` branches) equal to it.
 * Everything is checked before anything is copied: on error P is unchanged (but below) and the message names the
 * offending tensors. The file is read twice, a tensor at a time, each value checked in both passes: one that another
 * program rewrites in place or shortens between the passes (vitc replaces files by renaming) can bring other values
 * that pass the checks, or fail the load with P partly overwritten (discard it). */
int vt_params_load(vt_params *P, const char *path, vt_err *e);

/* vt_params_load's checks of f (opened from path) that need no values: the form, the names, shapes and dtypes, the
 * heads, windows and attention records; P may hold shapes only (shapes_only). 0, or -1 with vt_params_load's
 * message. */
int vt_params_check_file(const vt_params *P, const vt_st_file *f, const char *path, vt_err *e);

/* 1 when t may be absent from a weight file, as PyTorch's load_state_dict allows: a buffer the architecture defines
 * (VT_INIT_FIXED: Swin's relative_position_index and attn_mask, which newer timm does not save) keeps its
 * definition, a BatchNorm's num_batches_tracked (older PyTorch) reads 0. */
int vt_weights_may_be_absent(const vt_tensor *t);

/* vt_params_check_file without the heads, windows and attention records: the form, the names, shapes and dtypes. */
int vt_params_check_tensors(const vt_params *P, const vt_st_file *f, const char *path, vt_err *e);

/* vt_params_load from the already opened file f. */
int vt_params_load_file(vt_params *P, const vt_st_file *f, const char *path, vt_err *e);

/* Reads entry `name` of f (opened from path) into dst as the value of t, checked as vt_params_load checks a file:
 * t's shape, a float dtype (I64 for t's integer buffers), finite values, running variances >= 0, fixed buffers equal
 * to t's; dst (t->numel floats, may be t->data) is written only when all hold. */
int vt_param_read(const vt_st_file *f, const char *name, const vt_tensor *t, float *dst, const char *path, vt_err *e);

/* t's values rounded to int64 as files store integer buffers (malloc'd with vt_alloc; free with vt_free); NULL with a
 * message naming path and t when a value does not fit. */
int64_t *vt_param_i64(const vt_tensor *t, const char *path, vt_err *e);

/* Saves every tensor of P to path atomically: F32, or I64 for is_i64 buffers (values rounded). The metadata records
 * P's model and options (left out when they hold '"' or '\\', or the model name is 64 bytes or longer), form, heads,
 * windows, attention, epoch and data (the VT_*_KEY records). */
int vt_params_save(const vt_params *P, const char *path, vt_err *e);

/* Saves the loss of the last of `steps` steps as `loss` (and all of them as `losses` when steps > 1) and every
 * trained (not frozen) parameter's gradient as `grad/<name>` to path atomically; a NaN or Inf among them is an error,
 * nothing written. */
int vt_params_save_grads(const vt_params *P, const char *path, const float *losses, int steps, vt_err *e);

/* Reads tensor name of f (any dtype, converted to float) into a new vt_alloc'd array *out (free with
 * vt_free). *ndim: on input the required ndim, or -1 for any; on output the tensor's ndim. shape
 * must hold VT_ST_MAXDIM values. */
int vt_st_read_named(const vt_st_file *f, const char *name, float **out, int *ndim, int64_t *shape, vt_err *e);

/* Reads class labels (I64/I32/I16/I8/U8, or integral float values) from the one-dimensional tensor name of f into a
 * new vt_alloc'd int32 array *out of *n elements (free with vt_free); values must fit in int32. */
int vt_st_read_labels(const vt_st_file *f, const char *name, int32_t **out, int64_t *n, vt_err *e);

#endif
