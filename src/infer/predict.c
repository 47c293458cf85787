/* Running a loaded model in eval mode: one graph built once per (model, batch size, what it computes), images
 * decoded and preprocessed as the model's pretrained cfg (src/io/image.c), batches, top-k by softmax probability.
 * `vitc predict`, `vitc forward` and the embedding API (src/api/api.c) all run models through here. */
#include <math.h>
#include <string.h>

#include "vitc/dataset.h"
#include "vitc/predict.h"
#include "vitc/progress.h"
#include "vitc/weights.h"

vt_dtype_use vt_graph_dtype_use(const vt_graph *g) {
    vt_dtype_use u = {0, 0, vt_gemm_bf16_runs(&g->gemm)};
    for (int i = 0; i < g->nn; i++) {
        const char *op = g->nodes[i]->op->name; /* linear_t (GroupMixFormer's qkv, output transposed): fp32 only */
        u.linears += strcmp(op, "linear") == 0 || strcmp(op, "linear_t") == 0;
        u.int8 += g->nodes[i]->kern && strcmp(g->nodes[i]->kern->name, "linear.onednn_int8") == 0;
    }
    return u;
}

int vt_dtype_fallback(const vt_model_cfg *c, vt_dtype_use u, char *msg, size_t n) {
    if (c->arch.bf16 && u.bf16 == 0) {
        snprintf(msg, n, "--dtype bf16, but no product outside the attention kernels reached the %lld "
                 "multiply-adds bf16 needs (at this model and batch size all are smaller): this ran fp32",
                 VT_GEMM_BF16_MNK);
        return 1;
    }
    if (!c->arch.int8 || u.int8 > 0) return 0;
    snprintf(msg, n, "--dtype int8, but none of the %d linear layers runs the int8 kernel (oneDNN has no fast int8 "
             "kernel on this CPU, VITC_GEMM=openblas, or fp32 measured faster for every shape): this ran fp32",
             u.linears);
    return 1;
}

/* Top-k (k ≤ VT_MAX_TOPK and ≤ K) of logits (K values) with softmax probabilities; ties go to the lower index. */
static void topk_of(const float *logits, int K, int k, vt_topk *out) {
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
    const int bilinear = p->interpolation && strcmp(p->interpolation, "bilinear") == 0;
    return (vt_preprocess){c->arch.img_size, c->arch.in_chans, p->crop_pct > 0.0f ? p->crop_pct : 0.875f,
                           {p->mean[0], p->mean[1], p->mean[2]}, {p->std[0], p->std[1], p->std[2]}, p->squash,
                           vt_arch_width(&c->arch), bilinear ? VT_INTERP_BILINEAR : VT_INTERP_BICUBIC};
}

int vt_model_at_size(const vt_model_cfg *c, int h, int w, vt_model_cfg *out, vt_err *e) {
    int ih, iw;
    vt_arch_input(&c->arch, &ih, &iw);
    if (h == ih && w == iw) {
        *out = *c;
        return 0;
    }
    if (vt_model_resizes(c)) { /* the same weights, its position embeddings resized to the input */
        vt_model_cfg at = *c;
        const int built = h == at.arch.img_size && w == vt_arch_width(&at.arch);
        at.arch.in_h = built ? 0 : h;
        at.arch.in_w = built ? 0 : w;
        if (c->family->check && c->family->check(&at, e)) return -1;
        *out = at;
        return 0;
    }
    vt_model_overrides ov = vt_model_no_overrides();
    ov.img_size = h;
    ov.img_w = w;
    ov.crop_pct = 1.0f; /* tensors are neither resized nor cropped: the eval transform's range check does not apply */
    vt_err ce = {0};
    vt_model_cfg sized; /* out may be c */
    const int bad = vt_model_configure(c, &ov, &sized, &ce);
    if (!bad) sized.pre.crop_pct = c->pre.crop_pct;
    const int S = c->arch.img_size, Wd = vt_arch_width(&c->arch);
    if (!vt_model_any_size(c)) { /* the hint only where the size is one the model can be made at */
        if (h != w && !(c->family->caps & VT_CAP_TUPLE_SIZE))
            return vt_seterr(e, "%s takes %d×%d inputs, not %d×%d: its weights depend on the image size (%s family) "
                             "and are made for square inputs of one size (--img-size)", c->name, S, Wd, h, w,
                             c->family->name);
        char size[24];
        snprintf(size, sizeof size, h == w ? "%d" : "%dx%d", h, w);
        return bad ? vt_seterr(e, "%s takes %d×%d inputs, not %d×%d (its weights depend on the image size, and that "
                               "size does not fit it: %s)", c->name, S, Wd, h, w, ce.msg)
                   : vt_seterr(e, "%s takes %d×%d inputs, not %d×%d: its weights depend on the image size (%s "
                               "family); build it with --img-size %s (weights whose shapes stay the same at that size "
                               "load as they are, others must be made at that size)", c->name, S, Wd, h, w,
                               c->family->name, size);
    }
    if (bad) return vt_seterr(e, "%dx%d input: %s", h, w, ce.msg);
    *out = sized;
    return 0;
}

vt_params *vt_model_load(const vt_model_cfg *c, const char *path, vt_err *e) {
    vt_st_file f;
    if (vt_st_open(path, &f, e)) return NULL;
    vt_params *P = vt_model_load_file(c, &f, path, e);
    vt_st_close(&f);
    return P;
}

/* c's parameters as names and shapes, without values (vt_params.shapes_only); NULL if they cannot be made. */
static vt_params *shapes_of(const vt_model_cfg *c) {
    vt_err e = {0};
    vt_params *S = vt_params_new(&e);
    if (S) S->shapes_only = 1;
    if (S && vt_model_create_params(c, S, &e)) {
        vt_params_free(S);
        return NULL;
    }
    return S;
}

/* 1 if f holds a tensor S lacks (DeiT's dist_token: neither a size nor a class count makes such a file fit). */
static int holds_extra(const vt_params *S, const vt_st_file *f) {
    for (int i = 0; i < f->n; i++)
        if (!vt_params_find(S, f->entries[i].name)) return 1;
    return 0;
}

/* 1 if file entry fe has t's dimensions from d0 on (and t's rank). */
static int shape_from(const vt_st_entry *fe, const vt_tensor *t, int d0) {
    int same = fe->ndim == t->ndim;
    for (int d = d0; same && d < t->ndim; d++) same = fe->shape[d] == t->shape[d];
    return same;
}

/* 1 if the tensors of f that have other shapes than c's are all ones whose shape depends on the image size (it differs
 * between c and c at the square size `alt`): then the size may be why f does not fit; 0 when a shape that does not
 * depend on it differs too (--heads, --dims), f holds a tensor c lacks, or none differs. */
static int size_may_be_why(const vt_model_cfg *c, int alt, const vt_st_file *f) {
    vt_model_cfg c0 = *c;
    c0.arch.img_size = alt;
    c0.arch.img_w = 0;
    vt_params *S = shapes_of(c), *S0 = shapes_of(&c0);
    int sized = 0, other = !S || !S0 || holds_extra(S, f);
    for (int i = 0; !other && i < S->n; i++) {
        const vt_tensor *t = S->t[i], *t0 = vt_params_find(S0, t->name);
        const vt_st_entry *fe = vt_st_find(f, t->name);
        if (!fe || shape_from(fe, t, 0)) continue;
        int dep = !t0 || t0->ndim != t->ndim; /* depends on the size: another shape (or none) at the named one */
        for (int d = 0; !dep && d < t->ndim; d++) dep = t0->shape[d] != t->shape[d];
        if (dep)
            sized = 1;
        else
            other = 1;
    }
    vt_params_free(S);
    vt_params_free(S0);
    return sized && !other;
}

/* The class count f's classifier is made for when f holds c's tensors (buffers a file may leave out aside) and no
 * other, and those of other shapes than c's are all sized by c's class count in their first dimension (head.weight,
 * head.bias, ...), with one other count K there and the rest of their shapes c's: K (--num-classes K loads it); else
 * 0. */
static int classes_may_be_why(const vt_model_cfg *c, const vt_st_file *f) {
    vt_params *S = shapes_of(c);
    int K = 0, other = !S || holds_extra(S, f);
    for (int i = 0; !other && i < S->n; i++) {
        const vt_tensor *t = S->t[i];
        const vt_st_entry *fe = vt_st_find(f, t->name);
        if (!fe) {
            other = !vt_weights_may_be_absent(t);
            continue;
        }
        if (shape_from(fe, t, 0)) continue;
        other = !shape_from(fe, t, 1) || t->shape[0] != c->arch.num_classes || fe->shape[0] < 1 ||
                fe->shape[0] > INT32_MAX / 2 || (K && fe->shape[0] != K);
        K = (int)fe->shape[0];
    }
    vt_params_free(S);
    return other ? 0 : K;
}

/* The side of the square grid of n positions, or 0 when n is no square. */
static int64_t square_side(int64_t n) {
    int64_t g = (int64_t)sqrt((double)n);
    while (g * g > n) g--;
    while ((g + 1) * (g + 1) <= n) g++;
    return n > 0 && g * g == n ? g : 0;
}

/* What the rows of f's pos_embed say when they are not c's (a ViT whose pos_embed holds its class token's row, if any,
 * then one per patch): the square size they were made at, or a distilled DeiT's extra token, written into note (n
 * bytes); 0 when they say neither (or c has no such pos_embed). */
static int pos_embed_note(const vt_model_cfg *c, const vt_st_file *f, char *note, size_t n) {
    vt_params *S = shapes_of(c);
    const vt_tensor *t = S ? vt_params_find(S, "pos_embed") : NULL;
    const vt_st_entry *fe = vt_st_find(f, "pos_embed");
    const vt_arch_cfg *a = &c->arch;
    const int64_t lead = a->class_token ? 1 : 0, p = a->patch > 0 ? a->patch : 1;
    const int64_t grid = (int64_t)(a->img_size / p) * ((a->img_w ? a->img_w : a->img_size) / p);
    int said = 0;
    if (t && fe && t->ndim == 3 && fe->ndim == 3 && fe->shape[2] == t->shape[2] && fe->shape[1] != t->shape[1] &&
        t->shape[1] == lead + grid && fe->shape[1] > lead) {
        const int64_t rows = fe->shape[1] - lead, g = square_side(rows), g1 = square_side(rows - 1);
        if (g && g * p <= 1 << 16)
            said = snprintf(note, n, " (its pos_embed holds a %lldx%lld grid of positions: weights made at "
                            "--img-size %lld)", (long long)g, (long long)g, (long long)(g * p)) > 0;
        else if (g1 && lead)
            said = snprintf(note, n, " (its pos_embed holds a %lldx%lld grid and one more token than %s's: a distilled "
                            "DeiT's distillation token, which vitc's ViTs do not have)", (long long)g1, (long long)g1,
                            c->name) > 0;
        else if (g1)
            said = snprintf(note, n, " (its pos_embed holds a %lldx%lld grid and a class token's row, which %s, "
                            "pooling its tokens, does not have)", (long long)g1, (long long)g1, c->name) > 0;
    }
    vt_params_free(S);
    return said;
}

/* A load's error: le's message (the weights' own) into e, naming the file once and saying when the tensors that do not
 * fit are the classifier's for another class count, or c's weights depend on an image size and they are such (f: the
 * file, NULL if not known); -1. An empty le: e already holds the error (out of memory, the model's). */
static int load_error(const vt_model_cfg *c, const vt_st_file *f, const char *path, const vt_err *le, vt_err *e) {
    if (!le->msg[0]) return -1;
    const vt_model_cfg *named = vt_model_find(c->name);
    char note[320] = "", size[24];
    const int S = c->arch.img_size, at_named = named && S == named->arch.img_size && !c->arch.img_w;
    /* the size-dependent tensors: those whose shapes differ from c's at the named size, or (c at it) at twice it */
    const int K = f ? classes_may_be_why(c, f) : 0;
    if (K)
        snprintf(note, sizeof note, " (its classifier is made for %d classes, the model's for %d: --num-classes %d)",
                 K, c->arch.num_classes, K);
    else if (named && !vt_model_any_size(c) && f &&
             size_may_be_why(c, at_named ? 2 * S : named->arch.img_size, f) && !pos_embed_note(c, f, note, sizeof note))
        snprintf(note, sizeof note, " (%s's weights depend on the image size: these may be made at another size "
                 "than %s: --img-size)", c->name, vt_arch_size_text(&c->arch, size, sizeof size));
    char brief[VT_PATH_BRIEF]; /* as vt_params_load names it */
    if (strstr(le->msg, vt_path_brief(path, brief, sizeof brief))) /* name the file once */
        return vt_seterr_from(e, le, "%s%s", le->msg, note);
    return vt_seterr_from(e, le, "%s: %s%s", path, le->msg, note);
}

/* c's parameters' names and shapes, without their values (vt_params.shapes_only): a wrong --dims costs no memory. */
static int check_shapes(const vt_model_cfg *c, const vt_st_file *f, const char *path, int heads, vt_err *le,
                        vt_err *e) {
    vt_params *S = vt_params_new(e);
    if (S) S->shapes_only = 1;
    const int rc = !S || vt_model_create_params(c, S, e) ? -1
                   : heads                               ? vt_params_check_file(S, f, path, le)
                                                         : vt_params_check_tensors(S, f, path, le);
    vt_params_free(S);
    return rc;
}

int vt_model_file_in_training_form(const vt_model_cfg *c, const vt_st_file *f) {
    const char *model = vt_st_meta(f, VT_MODEL_KEY); /* another model's file says nothing of c's form */
    if (c->arch.train_form || !vt_model_has_form(c) || (model && vt_model_find(model) != vt_model_find(c->name)))
        return 0;
    if (!(c->family->caps & VT_CAP_FORM_RECORD)) return vt_weights_has_branches(f); /* vitc records no form there */
    const char *rec = vt_st_meta(f, VT_FORM_KEY);
    return rec && strcmp(rec, "training") == 0;
}

int vt_model_check_tensors(const vt_model_cfg *c, const vt_st_file *f, const char *path, vt_err *e) {
    vt_err le = {0};
    return check_shapes(c, f, path, 0, &le, e) ? load_error(c, f, path, &le, e) : 0;
}

vt_params *vt_model_load_file(const vt_model_cfg *c, const vt_st_file *f, const char *path, vt_err *e) {
    vt_err le = {0};
    /* the file's names and shapes against the model's before its parameters are allocated (a wrong --dims could
     * ask for gigabytes), then the values */
    vt_params *P = NULL;
    int rc = check_shapes(c, f, path, 1, &le, e);
    if (rc == 0 && (!(P = vt_params_new(e)) || vt_model_create_params(c, P, e))) rc = -2;
    if (rc == 0) rc = vt_params_load_file(P, f, path, &le);
    if (rc == 0) return P;
    vt_params_free(P);
    load_error(c, f, path, &le, e);
    return NULL;
}

const char *vt_model_class_name(const vt_model_cfg *c, const vt_params *P, int cls) {
    if (!P->folder && c->pre.dataset && strcmp(c->pre.dataset, "fashion-mnist") == 0 && c->arch.num_classes == 10)
        return vt_fmnist_class_name(cls);
    return NULL;
}

/* The classifier head's input (timm's pre-logits): the input of the linear node that makes the logits, or of the
 * linear `head` when the logits combine more (Refined-ViT's aux_head); NULL if there is none. */
static vt_tensor *pre_logits(vt_graph *g, vt_tensor *logits) {
    const vt_tensor *root = vt_root(logits);
    for (int i = g->nn - 1; i >= 0; i--) {
        const vt_node *n = g->nodes[i];
        if (n->out == root) {
            if (strcmp(n->op->name, "linear") == 0) return n->in[0];
            break;
        }
    }
    for (int i = g->nn - 1; i >= 0; i--) {
        const vt_node *n = g->nodes[i];
        if (strcmp(n->op->name, "linear") == 0 && n->nin > 1 && strcmp(n->in[1]->name, "head.weight") == 0)
            return n->in[0];
    }
    return NULL;
}

void vt_predictor_free(vt_predictor *p) {
    vt_graph_free(p->g);
    p->g = NULL;
}

int vt_predictor_init(vt_predictor *p, const vt_model_cfg *c, vt_params *P, int batch, int what, vt_err *e) {
    memset(p, 0, sizeof *p);
    p->cfg = *c;
    p->batch = batch;
    if (batch < 1 || batch > 65536) return vt_seterr(e, "batch size %d is outside [1, 65536]", batch);
    if ((what & VT_PRED_MAPS) && !c->family->features)
        return vt_seterr_code(e, VT_E_USAGE, "%s has no stage feature maps (only hierarchical backbones do)", c->name);
    if (!(p->g = vt_graph_new(P, 0, e))) return -1;
    if (what & VT_PRED_MAPS) {
        p->nmaps = vt_model_features(p->g, &p->cfg, batch, &p->in, p->maps);
        for (int i = 0; i < p->nmaps; i++) vt_graph_output(p->g, p->maps[i]);
    } else {
        p->logits = vt_model_build(p->g, &p->cfg, batch, &p->in);
        vt_graph_output(p->g, p->logits);
        if ((what & VT_PRED_POOLED) && p->logits) {
            if (!(p->pooled = pre_logits(p->g, p->logits)) || p->pooled->ndim != 2 || p->pooled->shape[0] != batch) {
                vt_predictor_free(p);
                return vt_seterr_code(e, VT_E_USAGE, "%s has no pooled features (no linear classifier head found)",
                                      c->name);
            }
            vt_graph_output(p->g, p->pooled);
        }
    }
    if (vt_graph_finalize(p->g, e)) {
        vt_predictor_free(p);
        return -1;
    }
    return 0;
}

void vt_predictor_forward(vt_predictor *p, const float *x, int nb) {
    const int64_t per = p->in->numel / p->batch;
    memcpy(p->in->data, x, sizeof(float) * (size_t)(per * nb));
    memset(p->in->data + per * nb, 0, sizeof(float) * (size_t)(per * (p->batch - nb)));
    vt_graph_forward(p->g);
}

int vt_predictor_classify(vt_predictor *p, vt_image_source src, void *ctx, const char *const *names, int n, int k,
                          vt_prediction *out, float *inputs, float *logits, float *pooled, FILE *progress) {
    const vt_model_cfg *c = &p->cfg;
    const int K = c->arch.num_classes, B = p->batch, D = p->pooled ? p->pooled->shape[1] : 0;
    const vt_preprocess pp = vt_model_preprocess(c);
    const int64_t per = p->in->numel / B;
    vt_progress pg;
    vt_progress_start(&pg, n > B ? progress : NULL, "predict", "img", n, 0);
    int bad = 0;
    for (int i0 = 0; i0 < n; i0 += B) {
        const int nb = n - i0 < B ? n - i0 : B;
        memset(p->in->data, 0, sizeof(float) * (size_t)p->in->numel);
        for (int b = 0; b < nb; b++) {
            vt_prediction *r = &out[i0 + b];
            vt_clearerr(&r->err);
            r->ok = src(ctx, i0 + b, &pp, p->in->data + b * per, &r->err) == 0;
            if (!r->ok) memset(p->in->data + b * per, 0, sizeof(float) * (size_t)per);
            bad += !r->ok;
        }
        vt_graph_forward(p->g);
        for (int b = 0; b < nb; b++) {
            vt_prediction *r = &out[i0 + b];
            const float *row = p->logits->data + (int64_t)b * K;
            if (!r->ok) continue;
            for (int j = 0; j < K && r->ok; j++)
                if (!isfinite(row[j])) {
                    r->ok = 0;
                    bad++;
                    char name[32];
                    snprintf(name, sizeof name, "image %d", i0 + b);
                    vt_seterr_code(&r->err, VT_E_NONFINITE, "%s: the model's logits are not finite (class %d is %g): "
                                   "the weights overflow on this image", names ? names[i0 + b] : name, j,
                                   (double)row[j]);
                }
            if (!r->ok) continue;
            topk_of(row, K, k, &r->top);
            if (inputs) memcpy(inputs + (i0 + b) * per, p->in->data + b * per, sizeof(float) * (size_t)per);
            if (logits) memcpy(logits + (int64_t)(i0 + b) * K, row, sizeof(float) * (size_t)K);
            if (pooled && D)
                memcpy(pooled + (int64_t)(i0 + b) * D, p->pooled->data + (int64_t)b * D, sizeof(float) * (size_t)D);
        }
        vt_progress_update(&pg, i0 + nb);
    }
    vt_progress_end(&pg);
    return bad;
}

/* vt_image_source over files: ctx is the array of paths. */
static int file_source(void *ctx, int i, const vt_preprocess *pp, float *out, vt_err *e) {
    return vt_image_load(((const char *const *)ctx)[i], pp, out, e);
}

int vt_predict_files(const vt_model_cfg *c, vt_params *P, const char *const *paths, int n, int batch, int k,
                     vt_prediction *out, float *inputs, float *logits, vt_dtype_use *use, FILE *progress, vt_err *e) {
    if (c->arch.in_chans != 1 && c->arch.in_chans != 3)
        return vt_seterr(e, "predict reads 1- or 3-channel images; %s has %d input channels", c->name,
                         c->arch.in_chans);
    if (n < 1 || batch < 1 || k < 1) return vt_seterr(e, "predict needs n, batch and k >= 1");
    vt_predictor p;
    if (vt_predictor_init(&p, c, P, n < batch ? n : batch, VT_PRED_LOGITS, e)) return -1;
    const int bad =
        vt_predictor_classify(&p, file_source, (void *)paths, paths, n, k, out, inputs, logits, NULL, progress);
    if (use) *use = vt_graph_dtype_use(p.g);
    vt_predictor_free(&p);
    return bad;
}
