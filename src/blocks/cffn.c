/* cFFN: the compact FFN of Xu et al. 2023 (spec-hmhsa-cffn.md §2). fc1 and the activation are the host's; fc2
 * (hidden -> C) is replaced by U (hidden -> k) then V (k -> C) with no activation between, k = floor(t·hidden·C /
 * (hidden + C)) (= floor(t·hidden/(m+1)) for hidden = m·C; t = 2/3 by default).
 *   deployed form: prefix.fc2_u (Linear k x hidden, bias), prefix.fc2_v (Linear C x k, bias) (Next-ViT's 1x1-conv
 *     MLP: prefix.conv2_u (k, hidden, 1, 1), prefix.conv2_v (C, k, 1, 1), each with a bias);
 *   training form (A8, RepVGG style, r = 2): each factor is Σ_b BN_b(Conv1x1_b(·)), bias-free convs
 *     prefix.fc2_u.rep.{b}.conv.weight (k, hidden, 1, 1) and BN prefix.fc2_u.rep.{b}.bn.* over the output
 *     channels, statistics over batch x tokens (eps 1e-5, momentum 0.1); the same for fc2_v.
 * vt_cffn_deploy applies the exact merge of §2.3: α_b = γ_b/sqrt(σ²_b + ε), W = Σ_b diag(α_b)·W_b,
 * b = Σ_b (β_b − α_b·μ_b); U and V stay separate. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vitc/blocks.h"

#define CFFN_BN_EPS 1e-5f
#define CFFN_BN_MOMENTUM 0.1f

int vt_cffn_width(int hidden, int C, float t) {
    if (!(t > 0.0f)) t = 2.0f / 3.0f;
    int k = (int)floor((double)t * hidden * C / ((double)hidden + C) + 1e-6);
    return k < 1 ? 1 : k;
}

/* One factor map x (..., in) -> (..., out): Linear (deployed; a 1x1 conv when conv1x1) or Σ of r conv1x1 + BN
 * branches (training; convs initialised by the host's rule conv_rule, a VT_CONV_INIT_*: PyTorch's default, PVTv2's
 * normal(0, √(2/fan_out)), Next-ViT's trunc_normal(0.02)), of GELU(x) when gelu_in (training form only). With
 * r <= 3 the branches run as one product over their stacked weights (r·out, in) and one vt_batchnorm_sum of its r
 * channel groups: one GEMM of r·out columns instead of r of out (cFFN's k is narrow: 37 columns in PVTv2-b1's first
 * stage), and no separate BatchNorm outputs and adds. Larger r: the branches one by one. Training step at batch 16,
 * one graph of each form on one store, alternated in one process, 8 rounds (2026-11-29, Intel Xeon Ice Lake, 2
 * threads), best / per-round median speed-up: PVTv2-b1 hMHSA + cFFN 1.05 / 1.05 and 1.02 / 1.06, DeiT-T's 1.11 /
 * 1.08 and 1.06 / 1.09, Next-ViT-S's 1.05 / 1.06 and 1.01 / 1.05, DeiT-S's 0.90-1.02 in four runs (its k = 204
 * columns are wide enough already; its BatchNorm + add time fell from 5.3% to 4.2% of the step in `--profile`). */
static vt_tensor *factor(vt_graph *g, const char *prefix, vt_tensor *x, int out, int r, int train_form, int conv1x1,
                         int conv_rule, int gelu_in) {
    if (!train_form && conv1x1) return vt_pointwise_p(g, prefix, x, out, 1, VT_INIT_W02); /* Next-ViT's conv rule */
    if (!train_form) return vt_linear_p(g, prefix, x, out, 1, VT_INIT_W02); /* the host's Linear rule */
    if (vt_bad(g, 1, x)) return NULL;
    const int in = x->shape[x->ndim - 1], fused = r <= 3;
    vt_tensor *sum = NULL, *ws[3], *bn[15];
    if (gelu_in && !fused) x = vt_gelu(g, x);
    for (int b = 0; b < r; b++) {
        char pre[VT_NAMELEN], nm[VT_NAMELEN], sub[32];
        snprintf(sub, sizeof sub, "rep.%d", b);
        vt_pname(pre, prefix, sub);
        int wsh[4] = {out, in, 1, 1}, w2[2] = {out, in};
        vt_tensor *w = vt_param(g, vt_pname(nm, pre, "conv.weight"), 4, wsh,
                                vt_conv_init(in, out, conv_rule));
        if (w) w->paper_count = 1;
        if (fused) {
            ws[b] = vt_reshape(g, w, 2, w2);
            if (vt_bn_tensors(g, vt_pname(nm, pre, "bn"), out, bn + 5 * b)) return NULL;
            continue;
        }
        vt_tensor *y = vt_linear(g, x, vt_reshape(g, w, 2, w2), NULL);
        y = vt_batchnorm_p(g, vt_pname(nm, pre, "bn"), y, -1, CFFN_BN_EPS, CFFN_BN_MOMENTUM);
        sum = sum ? vt_add(g, sum, y) : y;
    }
    if (!fused) return sum;
    vt_tensor *wc = r > 1 ? vt_concat(g, ws, r, 0) : ws[0];
    vt_tensor *z = gelu_in ? vt_gelu_linear(g, x, wc, NULL) : vt_linear(g, x, wc, NULL);
    return vt_batchnorm_sum(g, z, r, bn, CFFN_BN_EPS, CFFN_BN_MOMENTUM);
}

vt_tensor *vt_block_cffn(vt_graph *g, const char *prefix, vt_tensor *x, const vt_ffn_ctx *f) {
    if (!vt_block_ffn_input(g, prefix, x)) return NULL;
    char nm[VT_NAMELEN];
    const float t = f->opts ? f->opts->cffn_t : 0.0f;
    const int C = x->shape[x->ndim - 1], hidden = f->hidden, r = f->opts && f->opts->cffn_r > 0 ? f->opts->cffn_r : 2;
    if (hidden < 1 || r > 64) return vt_fail(g, "cffn", "%s: hidden %d / branches %d out of range", prefix, hidden, r);
    if (f->tv_names) return vt_fail(g, "cffn", "%s: cFFN has no torchvision (mlp.0 / mlp.3) layout", prefix);
    const int k = vt_cffn_width(hidden, C, t);
    const int cv = f->conv1x1;
    if (!f->train_form && !cv && !f->relu) { /* deployed: GELU where the host's MLP has it (vt_block_ffn_gelu_linear):
                                               * fc2_u's GEMM prologue, or fc1's oneDNN post-op where fc1 runs as a
                                               * primitive (DeiT-T at batch 16 1.02-1.08x, DeiT-S 0.99-1.07x; Ice
                                               * Lake, 2026-11-29); a separate GELU pass was 8% of
                                               * pvt_v2_b1_hmhsa_cffn's batch-1 step, and fc1's GELU epilogue run
                                               * after the product made DeiT-T's fc1 1.5x slower than its plain fc1 */
        vt_tensor *u = vt_block_ffn_gelu_linear(g, prefix, x, f, vt_pname(nm, prefix, "fc2_u"), k, VT_INIT_W02);
        return factor(g, vt_pname(nm, prefix, "fc2_v"), u, C, r, 0, 0, f->conv_fanout, 0);
    }
    /* the host's fc1 (+ PVTv2's DWConv) and GELU; after the DWConv, GELU goes into the U branches' stacked GEMM (its
     * prologue, as the host MLP's fc2 has it) rather than a separate pass, whose output the arena kept: in
     * pvt_v2_b1_hmhsa_cffn's training step at batch 16 the GELU op was 6% of the time, the arena 1,669 -> 1,337 MiB,
     * and the step 1.02-1.04x faster (best of 8 alternated rounds, medians 0.99-1.05; Ice Lake, 2026-11-29). After a
     * plain fc1, the host MLP's rule (vt_block_gelu_in_fc1): over 2^20 hidden floats in a train graph the prologue
     * too, not fc1's epilogue with its kept GELU output and derivative: deit_tiny_hmhsa_cffn's training arena at
     * batch 16 543.7 -> 433.5 MiB, deit_small_hmhsa_cffn's 1,095.5 -> 886.0, the steps 0.99-1.00x (AMD EPYC Zen 4,
     * 2026-12-06, alternated) */
    const int gelu_in = f->train_form && !cv && !f->relu && (g->training ? !vt_block_gelu_in_fc1(g, x, f) : f->dwconv);
    vt_tensor *h = gelu_in ? vt_block_fc1_pre(g, prefix, x, f) : vt_block_fc1_act(g, prefix, x, f);
    vt_tensor *u = factor(g, vt_pname(nm, prefix, cv ? "conv2_u" : "fc2_u"), h, k, r, f->train_form, cv, f->conv_fanout,
                          gelu_in);
    return factor(g, vt_pname(nm, prefix, cv ? "conv2_v" : "fc2_v"), u, C, r, f->train_form, cv, f->conv_fanout, 0);
}

/* ---- train -> deploy merge ---- */

/* The training tensor stem.rep.b.suffix, or NULL. */
static vt_tensor *rep_tensor(const vt_params *P, const char *stem, int b, const char *suffix) {
    char nm[2 * VT_NAMELEN];
    snprintf(nm, sizeof nm, "%s.rep.%d.%s", stem, b, suffix);
    return vt_params_find(P, nm);
}

/* Marks t (if in P) as used. */
static void mark(const vt_params *P, char *used, const vt_tensor *t) {
    for (int i = 0; t && i < P->n; i++)
        if (P->t[i] == t) used[i] = 1;
}

/* Merges the branches of stem into dep tensor d (stem.weight (out, in) or (out, in, 1, 1), or stem.bias (out)). */
static int merge_one(const vt_params *P, char *used, const char *stem, vt_tensor *d, int is_bias, float eps,
                     vt_err *e) {
    const int out = d->shape[0], in = is_bias ? 1 : d->shape[1];
    const int conv = d->ndim == 4 && d->shape[2] == 1 && d->shape[3] == 1;
    if ((is_bias && d->ndim != 1) || (!is_bias && d->ndim != 2 && !conv))
        return vt_seterr(e, "deploy: %s has an unexpected shape for a merged factor map", d->name);
    double *acc = calloc((size_t)out * (size_t)in, sizeof *acc);
    if (!acc) return vt_seterr_code(e, VT_E_NOMEM, "deploy: out of memory");
    int nb = 0;
    for (int b = 0;; b++) {
        vt_tensor *w = rep_tensor(P, stem, b, "conv.weight"), *ga = rep_tensor(P, stem, b, "bn.weight");
        vt_tensor *be = rep_tensor(P, stem, b, "bn.bias"), *mu = rep_tensor(P, stem, b, "bn.running_mean");
        vt_tensor *va = rep_tensor(P, stem, b, "bn.running_var"), *nt = rep_tensor(P, stem, b, "bn.num_batches_tracked");
        if (!w) break;
        if (!ga || !be || !mu || !va || w->ndim != 4 || w->shape[0] != out || (!is_bias && w->shape[1] != in) ||
            w->shape[2] != 1 || w->shape[3] != 1 || ga->numel != out || be->numel != out || mu->numel != out ||
            va->numel != out) {
            free(acc);
            return vt_seterr(e, "deploy: branch %s.rep.%d is incomplete or does not match %s", stem, b, d->name);
        }
        mark(P, used, w), mark(P, used, ga), mark(P, used, be), mark(P, used, mu), mark(P, used, va);
        mark(P, used, nt);
        const int win = w->shape[1];
        for (int o = 0; o < out; o++) {
            const double a = ga->data[o] / sqrt((double)va->data[o] + eps);
            if (is_bias)
                acc[o] += be->data[o] - a * mu->data[o];
            else
                for (int i = 0; i < win; i++) acc[(size_t)o * in + i] += a * w->data[(size_t)o * win + i];
        }
        nb++;
    }
    for (int64_t i = 0; i < d->numel; i++) d->data[i] = (float)acc[i];
    free(acc);
    return nb ? 0 : vt_seterr(e, "deploy: no training branches %s.rep.0.* for %s", stem, d->name);
}

int vt_cffn_deploy(const vt_params *train, vt_params *dep, float bn_eps, vt_err *e) {
    if (!(bn_eps >= 0.0f)) bn_eps = CFFN_BN_EPS;
    char *used = calloc((size_t)train->n + 1, 1);
    if (!used) return vt_seterr_code(e, VT_E_NOMEM, "deploy: out of memory");
    int rc = 0;
    for (int i = 0; rc == 0 && i < dep->n; i++) {
        vt_tensor *d = dep->t[i];
        const vt_tensor *s = vt_params_find(train, d->name);
        if (s) {
            if (s->ndim != d->ndim || memcmp(s->shape, d->shape, sizeof(int) * (size_t)d->ndim)) {
                char a[64], b[64];
                rc = vt_seterr(e, "deploy: %s is %s in the training weights but %s deployed", d->name,
                               vt_shape_str(s, a, 64), vt_shape_str(d, b, 64));
                break;
            }
            memcpy(d->data, s->data, sizeof(float) * (size_t)d->numel);
            mark(train, used, s);
            continue;
        }
        char stem[VT_NAMELEN];
        const size_t L = strlen(d->name);
        const int is_w = L > 7 && strcmp(d->name + L - 7, ".weight") == 0;
        const int is_b = L > 5 && strcmp(d->name + L - 5, ".bias") == 0;
        if (is_w || is_b) {
            snprintf(stem, sizeof stem, "%.*s", (int)(L - (is_w ? 7 : 5)), d->name);
            if (rep_tensor(train, stem, 0, "conv.weight")) {
                rc = merge_one(train, used, stem, d, is_b, bn_eps, e);
                continue;
            }
        }
        rc = vt_seterr(e, "deploy: deployed tensor %s has no counterpart in the training weights", d->name);
    }
    for (int i = 0; rc == 0 && i < train->n; i++)
        if (!used[i]) rc = vt_seterr(e, "deploy: training tensor %s is not used by the deployed model", train->t[i]->name);
    free(used);
    return rc;
}
