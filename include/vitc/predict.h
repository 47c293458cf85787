/* Running a loaded model in eval mode: an eval graph built once for a batch size (logits, pooled features or stage
 * maps), images preprocessed as the model's pretrained cfg, batching and top-k (what `vitc predict` and `vitc
 * forward` print, and what the embedding API in api.h returns). */
#ifndef VITC_PREDICT_H
#define VITC_PREDICT_H

#include <stdio.h>

#include "vitc/image.h"
#include "vitc/model.h"
#include "vitc/safetensors.h"

#define VT_MAX_TOPK 64

/* The k most probable classes of one image, most probable first. */
typedef struct vt_topk {
    int k;
    int cls[VT_MAX_TOPK];
    double prob[VT_MAX_TOPK]; /* softmax probabilities */
} vt_topk;

/* The result for one image: its top-k, or the error that kept it from being classified. */
typedef struct vt_prediction {
    int ok;
    vt_topk top;
    vt_err err;
} vt_prediction;

/* A graph's lower-precision arithmetic: its linear layers (linear and linear_t nodes), those on the int8 kernel (linear.onednn_int8), and the
 * products that have run in bf16 (vt_gemm_bf16_runs). */
typedef struct vt_dtype_use {
    int linears, int8;
    long long bf16;
} vt_dtype_use;

/* The linear layers of the finalized graph g, those on the int8 kernel (after a run: those that ran it) and the
 * products run in bf16 so far. */
vt_dtype_use vt_graph_dtype_use(const vt_graph *g);

/* When c asks for int8 (--dtype int8) and u counts no linear layer on the int8 kernel, or for bf16 and u counts no
 * product run in bf16, writes into msg (n bytes) that this ran fp32 and why, and returns 1; 0 otherwise. bench,
 * forward, predict and eval print it as their warning. */
int vt_dtype_fallback(const vt_model_cfg *c, vt_dtype_use u, char *msg, size_t n);

/* The eval preprocessing of c (its pretrained cfg: size H x W, channels, crop_pct, mean, std). */
vt_preprocess vt_model_preprocess(const vt_model_cfg *c);

/* c for inputs of h x w pixels into out: c itself when the size is c's, c reconfigured when its weights fit any size
 * (vt_model_any_size; non-square where its family's official code takes that too), otherwise an error saying that
 * the weights fix the size. */
int vt_model_at_size(const vt_model_cfg *c, int h, int w, vt_model_cfg *out, vt_err *e);

/* A new parameter store of c loaded from the safetensors file at path (the message names the file, and says so when
 * the model's weights depend on an image size other than its named one); NULL on error. */
vt_params *vt_model_load(const vt_model_cfg *c, const char *path, vt_err *e);

/* vt_model_load from a safetensors file already open (vt_st_open; path names it in messages), which stays open. */
vt_params *vt_model_load_file(const vt_model_cfg *c, const vt_st_file *f, const char *path, vt_err *e);

/* 1 when c, built in its deployed form, has a training form and the open file f holds it by its own account: where
 * the forms share names (Next-ViT, VT_CAP_FORM_RECORD) its VT_FORM_KEY record says so, elsewhere (cFFN) its `.rep.`
 * branches do, unless f records another model; the commands that load weights then build c in it. */
int vt_model_file_in_training_form(const vt_model_cfg *c, const vt_st_file *f);

/* The names, shapes and dtypes of the open file f against c's parameters (vt_model_load's first check, without the
 * heads record and without allocating them); 0, or -1 with vt_model_load's message. */
int vt_model_check_tensors(const vt_model_cfg *c, const vt_st_file *f, const char *path, vt_err *e);

/* The name of class cls of c's dataset (Fashion-MNIST's ten), or NULL when the model's classes have no names here
 * or its weights P were trained on an image folder (P->folder: the folder's classes.json names them). */
const char *vt_model_class_name(const vt_model_cfg *c, const vt_params *P, int cls);

/* What a predictor's graph computes (flags). */
enum {
    VT_PRED_LOGITS = 1, /* logits (B, K) */
    VT_PRED_POOLED = 2, /* also the pooled features: the classifier head's input (B, D), timm's pre-logits */
    VT_PRED_MAPS = 4    /* the stage maps (B, C_i, H_i, W_i) of hierarchical backbones instead of logits */
};

/* An eval graph of one model for batches of up to `batch` images, built once and run many times. */
typedef struct vt_predictor {
    vt_model_cfg cfg;
    int batch;
    vt_graph *g;
    vt_tensor *in;                    /* the input (batch, C, H, W) */
    vt_tensor *logits, *pooled;       /* (batch, K) and (batch, D), or NULL when not asked for */
    vt_tensor *maps[VT_MAX_STAGES];   /* VT_PRED_MAPS: the stage maps */
    int nmaps;
} vt_predictor;

/* Builds and plans the eval graph of c (parameters P, not owned) for up to `batch` images computing `what`
 * (VT_PRED_*); an error when c has no pooled features or stage maps to give. */
int vt_predictor_init(vt_predictor *p, const vt_model_cfg *c, vt_params *P, int batch, int what, vt_err *e);

/* Frees the graph (a zeroed predictor is fine). */
void vt_predictor_free(vt_predictor *p);

/* Runs the graph on nb ≤ batch images x (nb, C, H, W); rows past nb are zero and their outputs meaningless. */
void vt_predictor_forward(vt_predictor *p, const float *x, int nb);

/* Fills out (C, H, W) with the preprocessed image i of a source; 0, or -1 with a message naming the image. */
typedef int (*vt_image_source)(void *ctx, int i, const vt_preprocess *pp, float *out, vt_err *e);

/* Classifies n images read from src in batches of the predictor's size (src fills an image of the predictor's input,
 * C x H x W, as vt_model_preprocess makes it): out[i] gets each image's top-k (k at most VT_MAX_TOPK and the
 * classes) or its own error (a bad image does not stop the others; names, if non-NULL, name the
 * images in messages). Non-NULL inputs / logits / pooled receive each classified image's preprocessed input
 * (n, C, H, W), logits (n, K) and pooled features (n, D); a failed image's rows (unreadable, or logits not finite)
 * are left as the caller had them. Progress goes to the stream `progress` (NULL: none) when there is more
 * than one batch. Returns the failed count. */
int vt_predictor_classify(vt_predictor *p, vt_image_source src, void *ctx, const char *const *names, int n, int k,
                          vt_prediction *out, float *inputs, float *logits, float *pooled, FILE *progress);

/* Classifies the n image files in paths with c (parameters P) in batches of up to `batch` images, as
 * vt_predictor_classify (inputs, logits: see there); use (if non-NULL) gets the graph's linear layers and those that
 * ran int8. Returns the number of images that failed (could not be read, or gave non-finite logits), or -1 (e set)
 * if the model itself cannot run. */
int vt_predict_files(const vt_model_cfg *c, vt_params *P, const char *const *paths, int n, int batch, int k,
                     vt_prediction *out, float *inputs, float *logits, vt_dtype_use *use, FILE *progress, vt_err *e);

#endif
