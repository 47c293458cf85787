/* Classifying images with a loaded model: preprocessing as the model's pretrained cfg, batching and top-k (what
 * `vitc predict` prints; usable by any C caller). */
#ifndef VITC_PREDICT_H
#define VITC_PREDICT_H

#include "vitc/image.h"
#include "vitc/model.h"

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

/* Top-k (k ≤ VT_MAX_TOPK and ≤ K) of logits (K values) with softmax probabilities; ties go to the lower index. */
void vt_topk_of(const float *logits, int K, int k, vt_topk *out);

/* The eval preprocessing of c (its pretrained cfg: size, channels, crop_pct, mean, std). */
vt_preprocess vt_model_preprocess(const vt_model_cfg *c);

/* Classifies the n image files in paths with c (parameters P) in batches of up to `batch` images: out[i] gets each
 * image's top-k or its own error (a bad image does not stop the others). When inputs / logits are non-NULL they
 * receive every image's preprocessed input (n, C, S, S) and logits (n, K). Returns the number of images that could
 * not be read, or -1 (e set) if the model itself cannot run. */
int vt_predict_files(const vt_model_cfg *c, vt_params *P, const char *const *paths, int n, int batch, int k,
                     vt_prediction *out, float *inputs, float *logits, vt_err *e);

#endif
