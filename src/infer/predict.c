/* Image classification with a loaded model: each file decoded and preprocessed as the model's pretrained cfg
 * (src/io/image.c), batches through one eval graph built once, top-k by softmax probability. */
#include <math.h>
#include <string.h>

#include "vitc/predict.h"

void vt_topk_of(const float *logits, int K, int k, vt_topk *out) {
    if (k > K) k = K;
    if (k > VT_MAX_TOPK) k = VT_MAX_TOPK;
    double mx = logits[0], sum = 0.0;
    for (int j = 1; j < K; j++) mx = logits[j] > mx ? logits[j] : mx;
    for (int j = 0; j < K; j++) sum += exp(logits[j] - mx);
    out->k = k;
    for (int t = 0; t < k; t++) { /* selection of the k largest, ties to the lower index */
        int best = -1;
        for (int j = 0; j < K; j++) {
            int taken = 0;
            for (int u = 0; u < t && !taken; u++) taken = out->cls[u] == j;
            if (!taken && (best < 0 || logits[j] > logits[best])) best = j;
        }
        out->cls[t] = best;
        out->prob[t] = exp(logits[best] - mx) / sum;
    }
}

vt_preprocess vt_model_preprocess(const vt_model_cfg *c) {
    const vt_pretrained_cfg *p = &c->pre;
    return (vt_preprocess){c->arch.img_size, c->arch.in_chans, p->crop_pct > 0.0f ? p->crop_pct : 0.875f,
                           {p->mean[0], p->mean[1], p->mean[2]}, {p->std[0], p->std[1], p->std[2]}};
}

int vt_predict_files(const vt_model_cfg *c, vt_params *P, const char *const *paths, int n, int batch, int k,
                     vt_prediction *out, float *inputs, float *logits, vt_err *e) {
    const int K = c->arch.num_classes;
    if (c->arch.in_chans != 1 && c->arch.in_chans != 3)
        return vt_seterr(e, "predict reads 1- or 3-channel images; %s has %d input channels", c->name,
                         c->arch.in_chans);
    if (n < 1 || batch < 1 || k < 1) return vt_seterr(e, "predict needs n, batch and k >= 1");
    const int B = n < batch ? n : batch;
    const vt_preprocess pp = vt_model_preprocess(c);
    const int64_t per = (int64_t)c->arch.in_chans * c->arch.img_size * c->arch.img_size;
    vt_graph *g = vt_graph_new(P, 0, e);
    vt_tensor *in = NULL, *y = g ? vt_model_build(g, c, B, &in) : NULL;
    if (!g) return -1;
    vt_graph_output(g, y);
    if (vt_graph_finalize(g, e)) {
        vt_graph_free(g);
        return -1;
    }
    int bad = 0;
    for (int i0 = 0; i0 < n; i0 += B) {
        const int nb = n - i0 < B ? n - i0 : B;
        memset(in->data, 0, sizeof(float) * (size_t)in->numel);
        for (int b = 0; b < nb; b++) {
            vt_prediction *p = &out[i0 + b];
            vt_clearerr(&p->err);
            p->ok = vt_image_load(paths[i0 + b], &pp, in->data + b * per, &p->err) == 0;
            bad += !p->ok;
        }
        vt_graph_forward(g);
        for (int b = 0; b < nb; b++) {
            vt_prediction *p = &out[i0 + b];
            const float *row = y->data + (int64_t)b * K;
            if (!p->ok) continue;
            for (int j = 0; j < K && p->ok; j++)
                if (!isfinite(row[j])) {
                    p->ok = 0;
                    bad++;
                    vt_seterr(&p->err, "%s: the model's logits are not finite (class %d is %g): the weights overflow "
                              "on this image", paths[i0 + b], j, (double)row[j]);
                }
            if (!p->ok) continue;
            vt_topk_of(row, K, k, &p->top);
            if (inputs) memcpy(inputs + (i0 + b) * per, in->data + b * per, sizeof(float) * (size_t)per);
            if (logits) memcpy(logits + (int64_t)(i0 + b) * K, row, sizeof(float) * (size_t)K);
        }
    }
    vt_graph_free(g);
    return bad;
}
