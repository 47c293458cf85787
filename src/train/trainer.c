/* Gradients on a batch (vt_grad_steps, vt_grad_accum), evaluation (vt_evaluate; over the ranks of a data-parallel
 * run, each scoring a slice of the validation set), and the training loop (vt_train) with its recipe hooks; the data
 * sets are opened in data.c, checkpoints and the run folder are handled in rundir.c (what they share: trainer.h);
 * batches come from the threaded loader (src/train/loader.c). */
#define _XOPEN_SOURCE 700 /* realpath */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "trainer.h"
#include "vitc/fileio.h"
#include "vitc/adapt.h"
#include "vitc/api.h"
#include "vitc/augment.h"
#include "vitc/dist.h"
#include "vitc/ema.h"
#include "vitc/metrics.h"
#include "vitc/ops.h"
#include "vitc/optim.h"
#include "vitc/predict.h"
#include "vitc/progress.h"
#include "vitc/recipe.h"
#include "vitc/sampler.h"
#include "vitc/safetensors.h"
#include "vitc/schedule.h"
#include "vitc/train.h"
#include "vitc/weights.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* A train-mode graph: logits, labels input and mean cross-entropy loss; with soft targets (Mixup/CutMix) a
 * `targets` input (B, K) and the soft-target cross-entropy instead (labels then only score the batch). */
typedef struct {
    vt_graph *g;
    vt_tensor *x, *labels, *targets, *logits, *loss;
} train_graph;

static int build_train(const vt_model_cfg *c, vt_params *P, int B, float smoothing, int soft, vt_dist *sync,
                       train_graph *t, vt_err *e) {
    memset(t, 0, sizeof *t);
    if (!(t->g = vt_graph_new(P, 1, e))) return -1;
    if (sync && sync->size > 1) { /* synchronised BatchNorm over the ranks */
        t->g->allsum = vt_dist_allsum;
        t->g->allsum_ctx = sync;
        t->g->replicas = sync->size;
    }
    t->logits = vt_model_build(t->g, c, B, &t->x);
    t->labels = vt_input(t->g, "labels", 1, &B);
    const int ts[2] = {B, c->arch.num_classes};
    if (soft) t->targets = vt_input(t->g, "targets", 2, ts);
    t->loss = vt_model_loss(t->g, soft ? vt_soft_cross_entropy(t->g, t->logits, t->targets)
                                       : vt_cross_entropy(t->g, t->logits, t->labels, smoothing));
    vt_graph_output(t->g, t->logits);
    vt_graph_set_loss(t->g, t->loss);
    if (vt_graph_finalize(t->g, e)) {
        vt_graph_free(t->g);
        t->g = NULL;
        return -1;
    }
    return 0;
}

/* 0 when each of labels[0..n) is a class index of c (an integer in [0, K)), else -1 naming the first that is not: the
 * loss of another would read past its row of logits. */
static int check_labels(const vt_model_cfg *c, const float *labels, int n, vt_err *e) {
    const int K = c->arch.num_classes;
    for (int b = 0; b < n; b++)
        if (!(labels[b] >= 0 && labels[b] < K && labels[b] == floorf(labels[b])))
            return vt_seterr(e, "label %.9g of sample %d is outside [0, %d)", (double)labels[b], b, K);
    return 0;
}

int vt_grad_steps(const vt_model_cfg *c, vt_params *P, const float *x, const float *labels, int B, int steps,
                  double lr, double wd, float *losses, vt_err *e) {
    if (check_labels(c, labels, B, e)) return -1;
    vt_model_cfg tc = vt_model_training_form(c);
    tc.arch.drop_path = 0.0f; /* deterministic gradients: stochastic depth off */
    train_graph t;
    if (build_train(&tc, P, B, 0.0f, 0, NULL, &t, e)) return -1;
    vt_adamw opt = {0};
    int rc = 0;
    if (steps > 1 && vt_adamw_init(&opt, P, 0.9f, 0.999f, 1e-8f, (float)wd, e)) rc = -1;
    memcpy(t.x->data, x, sizeof(float) * (size_t)t.x->numel);
    memcpy(t.labels->data, labels, sizeof(float) * (size_t)B);
    for (int s = 0; rc == 0 && s < (steps > 1 ? steps : 1); s++) {
        vt_graph_forward(t.g);
        losses[s] = t.loss->data[0];
        vt_params_zero_grad(P);
        vt_graph_backward(t.g);
        if (steps > 1 && s < steps - 1) vt_adamw_step(&opt, (float)lr);
    }
    if (steps > 1) vt_adamw_free(&opt);
    vt_graph_free(t.g);
    return rc;
}

/* ---- gradient accumulation (--accum-steps) ---- */

/* Backward of micro-batch j of `accum` making one optimiser step: gradients zeroed on the first, accumulated by
 * each; after the last, averaged over the ranks by gb (NULL: one process; the allreduce starts only during the last
 * backward) and scaled by 1/accum (timm divides the loss by accum: the same up to rounding). */
static int accum_backward(train_graph *t, vt_params *P, int j, int accum, vt_dist_grads *gb, vt_err *e) {
    if (j == 0) vt_params_zero_grad(P);
    const int last = j == accum - 1;
    vt_dist_grads_hold(gb, !last);
    vt_graph_backward(t->g);
    if (!last) return 0;
    if (gb && vt_dist_grads_average(gb, e)) return -1;
    if (accum == 1) return 0;
    const float s = 1.0f / (float)accum;
    for (int i = 0; i < P->n; i++) {
        vt_tensor *p = P->t[i];
        if (p->grad)
            for (int64_t k = 0; k < p->numel; k++) p->grad[k] *= s;
    }
    return 0;
}

int vt_grad_accum(const vt_model_cfg *c, vt_params *P, const float *x, const float *labels, int B, int accum,
                  float *loss, vt_err *e) {
    if (B <= 0 || accum <= 0) return vt_seterr(e, "vt_grad_accum: batch %d and accum %d must be > 0", B, accum);
    if ((int64_t)B * accum > INT_MAX) return vt_seterr(e, "vt_grad_accum: batch %d × accum %d is too many", B, accum);
    if (check_labels(c, labels, B * accum, e)) return -1;
    vt_model_cfg tc = vt_model_training_form(c);
    tc.arch.drop_path = 0.0f;
    train_graph t;
    if (build_train(&tc, P, B, 0.0f, 0, NULL, &t, e)) return -1;
    const size_t img = (size_t)t.x->numel / (size_t)B;
    double sum = 0.0;
    for (int j = 0; j < accum; j++) {
        memcpy(t.x->data, x + (size_t)j * B * img, sizeof(float) * (size_t)B * img);
        memcpy(t.labels->data, labels + (size_t)j * B, sizeof(float) * (size_t)B);
        vt_graph_forward(t.g);
        sum += t.loss->data[0];
        accum_backward(&t, P, j, accum, NULL, e);
    }
    *loss = (float)(sum / accum);
    vt_graph_free(t.g);
    return 0;
}

/* Sums over the rows of logits (B, K) whose label is >= 0 (the others are skipped images): cross-entropy loss,
 * correct top-1 and top-5 predictions (a label is in the top k when fewer than k logits rank before it: those above
 * its own, and those equal to it at a lower index, as top-1 takes the first of tied maxima). */
static void score(const float *logits, const int *labels, int n, int K, double *loss, int64_t *correct,
                  int64_t *correct5) {
    for (int b = 0; b < n; b++) {
        if (labels[b] < 0) continue;
        const float *r = logits + (size_t)b * K;
        int best = 0, above = 0;
        for (int k = 1; k < K; k++)
            if (r[k] > r[best]) best = k;
        for (int k = 0; k < K; k++) above += r[k] > r[labels[b]] || (r[k] == r[labels[b]] && k < labels[b]);
        double se = 0.0;
        for (int k = 0; k < K; k++) se += exp((double)r[k] - r[best]);
        *loss += log(se) - ((double)r[labels[b]] - r[best]);
        *correct += best == labels[b];
        if (correct5) *correct5 += above < 5;
    }
}

/* Loader batches ahead of the consumer. */
#define PREFETCH 3

/* vt_evaluate, with two things for the training loop: base, the index of src's first sample in the whole validation
 * set (a rank's slice starts past 0), for messages; poison 1: the testing aid --fault-nan-eval, a NaN as the first
 * logit of the first scored image (what weights that overflow give, whatever the ops do with a NaN input). */
static int evaluate(const vt_model_cfg *c, vt_params *P, const vt_source *src, const vt_transform *tf, int batch,
                    int workers, vt_loader *loader, vt_eval_result *r, FILE *progress, int base, int poison,
                    vt_err *e) {
    if (tf->size != c->arch.img_size || tf->width != vt_arch_width(&c->arch) || tf->chans != c->arch.in_chans)
        return vt_seterr(e, "%s expects %d×%d×%d inputs but the transform gives %d×%d×%d", c->name, c->arch.in_chans,
                         c->arch.img_size, vt_arch_width(&c->arch), tf->chans, tf->size, tf->width);
    if (src->nclasses > c->arch.num_classes)
        return vt_seterr(e, "the data has %d classes but %s has %d outputs (--num-classes %d)", src->nclasses, c->name,
                         c->arch.num_classes, src->nclasses);
    if (!loader && src->n > 0 && batch > src->n) batch = src->n; /* a graph no larger than the images it will see */
    vt_graph *g = vt_graph_new(P, 0, e);
    if (!g) return -1;
    vt_tensor *x;
    vt_tensor *logits = vt_model_build(g, c, batch, &x);
    vt_graph_output(g, logits);
    int *idx = malloc(sizeof(int) * (size_t)src->n), *lab = malloc(sizeof(int) * (size_t)batch);
    int rc = vt_graph_finalize(g, e);
    if (rc == 0 && (!idx || !lab)) rc = vt_seterr_code(e, VT_E_NOMEM, "out of memory");
    vt_loader *L = rc || loader ? loader
                                : vt_loader_new(src, tf, batch, workers > 0 ? workers : vt_loader_default_workers(),
                                                PREFETCH, VT_BAD_DROP, e);
    if (rc == 0 && !L) rc = -1;
    if (rc == 0) vt_iota(idx, src->n);
    if (rc == 0 && vt_loader_start(L, idx, src->n, 0, 0, 0, e) < 0) rc = -1;
    double sl = 0.0;
    int64_t correct = 0, correct5 = 0;
    int done = 0, scored = 0;
    vt_progress pg; /* only when there is more than one batch */
    vt_progress_start(&pg, src->n > batch ? progress : NULL, "Eval", "img", src->n, 0);
    while (rc == 0) {
        const int n = vt_loader_next(L, x->data, lab, e);
        if (n <= 0) {
            rc = n;
            break;
        }
        vt_graph_forward(g);
        for (int b = 0; poison && b < n; b++) /* the first scored row (an unreadable image's row is not scored) */
            if (lab[b] >= 0) {
                logits->data[(size_t)b * c->arch.num_classes] = NAN;
                poison = 0;
            }
        /* a scored image whose logits are not finite would make the loss NaN and the accuracy meaningless */
        const int K = c->arch.num_classes;
        for (int b = 0; rc == 0 && b < n; b++)
            for (int k = 0; lab[b] >= 0 && k < K; k++) {
                const float v = logits->data[(size_t)b * K + k];
                if (isfinite(v)) continue;
                const char *nm = src->name ? src->name(src->ctx, done + b) : NULL;
                char at[32];
                snprintf(at, sizeof at, "image %d", base + done + b);
                rc = vt_seterr(e, "%s: the model's logits are not finite (class %d is %g): the weights overflow on "
                               "this image", nm ? nm : at, k, (double)v);
                break;
            }
        if (rc) break;
        score(logits->data, lab, n, c->arch.num_classes, &sl, &correct, &correct5);
        for (int b = 0; b < n; b++) scored += lab[b] >= 0;
        for (int b = 0; r->top1 && b < n; b++) {
            const float *row = logits->data + (size_t)b * c->arch.num_classes;
            int best = 0;
            for (int k = 1; k < c->arch.num_classes; k++) best = row[k] > row[best] ? k : best;
            r->top1[done + b] = lab[b] < 0 ? -1 : best;
        }
        done += n;
        vt_progress_update(&pg, done);
    }
    vt_progress_end(&pg);
    if (rc == 0) { /* nothing scored: n 0, for the caller to refuse (a rank's slice may hold only unreadable images) */
        r->loss = scored ? sl / scored : 0.0;
        r->acc1 = scored ? (double)correct / scored : 0.0;
        r->acc5 = scored ? (double)correct5 / scored : 0.0;
        r->n = scored;
        r->skipped = vt_loader_skipped(L);
        const vt_dtype_use u = vt_graph_dtype_use(g); /* after the run: a layer dropped to fp32 is not counted */
        r->linears = u.linears;
        r->int8_linears = u.int8;
        r->bf16_runs = u.bf16;
    }
    if (L != loader) vt_loader_free(L);
    free(idx);
    free(lab);
    vt_graph_free(g);
    return rc;
}

int vt_evaluate(const vt_model_cfg *c, vt_params *P, const vt_source *src, const vt_transform *tf, int batch,
                int workers, vt_loader *loader, vt_eval_result *r, FILE *progress, vt_err *e) {
    if (evaluate(c, P, src, tf, batch, workers, loader, r, progress, 0, 0, e)) return -1;
    return r->n ? 0 : vt_seterr(e, "no readable image to evaluate");
}

void vt_train_defaults(vt_train_opts *o) {
    memset(o, 0, sizeof *o);
    o->log = stdout;
    o->warn = stderr;
    o->data = "fashion-mnist";
    o->epochs = 10;
    o->batch = 128;
    o->lr = 1e-3;
    o->min_lr = 1e-5;
    o->warmup_lr = 1e-6;
    o->weight_decay = 0.05;
    o->warmup_epochs = 1;
    o->smoothing = 0.1;
    o->seed = 0;
    o->augment = 1;
    o->log_every = 50;
    o->fault_nan_step = -1;
    o->fault_batch_step = -1;
    o->fault_nan_eval = -1;
    o->fault_grad_step = -1;
    o->fault_stop_step = -1;
    o->mixup = vt_mixup_timm(0);
    o->mixup.mixup_alpha = o->mixup.cutmix_alpha = 0.0; /* off */
    o->model_ema_decay = 0.99996;
    o->accum_steps = 1;
}

/* ---- recipe hooks of the training loop (checks, Mixup/CutMix, recipe record, DeiT transforms, epoch order) ---- */

/* Checks the recipe options against the model and batch; fills *mix (num_classes, smoothing) when mixing is on. */
static int recipe_check(const vt_model_cfg *c, const vt_train_opts *o, vt_mixup *mix, vt_err *e) {
    *mix = o->mixup;
    mix->num_classes = c->arch.num_classes;
    mix->smoothing = o->smoothing;
    if (o->accum_steps < 1) return vt_seterr(e, "accumulation steps %d must be >= 1", o->accum_steps);
    if (o->model_ema && !(o->model_ema_decay >= 0 && o->model_ema_decay <= 1))
        return vt_seterr(e, "model EMA decay %g outside [0, 1]", o->model_ema_decay);
    if (vt_mixup_enabled(mix) && o->batch % 2)
        return vt_seterr_code(e, VT_E_USAGE, "Mixup/CutMix mix each batch with its reverse and need an even batch "
                              "size (got %d)", o->batch);
    return 0;
}

/* Prints the resolved recipe and writes it to RUN/recipe.json (atomically); nothing without a recipe. */
static int recipe_record(const vt_train_opts *o, vt_err *e) {
    if (!o->recipe) return 0;
    char path[4096];
    snprintf(path, sizeof path, "%s/recipe.json", o->run_dir);
    if (o->log) vt_recipe_print(o->recipe, o->log);
    return vt_recipe_save(o->recipe, path, e);
}

/* Mixes the batch in t (x, labels as ints in lab) into soft targets when mixing is on, with the draws of key
 * (vt_mixup_key). */
static int mix_batch(const vt_mixup *mix, train_graph *t, const int *lab, uint64_t key, vt_err *e) {
    if (!t->targets) return 0;
    const vt_tensor *x = t->x;
    return vt_mixup_batch(mix, t->x->data, x->shape[0], x->shape[1], x->shape[2], x->shape[3], lab, t->targets->data,
                          key, NULL, e);
}

/* The DeiT per-image train transform a recipe asks for (RandAugment or the MSF's three-augment, RandomErasing or
 * RandomResizedCrop) in *p (vt_recipe_transforms); p->size 0 when it asks for none (no recipe, or the default's crop
 * + flip). */
static int recipe_wants_deit(const vt_recipe *r) {
    return r && (r->aa[0] || r->reprob > 0 || r->scale[0] < 1 || r->scale[1] < 1);
}

static int recipe_deit(const vt_train_opts *o, int size, vt_tf_params *p, vt_err *e) {
    memset(p, 0, sizeof *p);
    if (!recipe_wants_deit(o->recipe)) return 0;
    return vt_recipe_transforms(o->recipe, size, p, e);
}

/* This rank's image order of an epoch, drawn from (seed, epoch) alone (the same in every process and in a resumed
 * run; the one place that chooses the loader's index list), started on loader L: with repeated augmentation DeiT's
 * RASampler, which takes the rank and the rank count itself, each copy of an image keyed apart (index + n·copy) so
 * that its copies get their own augmentation; else a permutation of [0, n) sharded as torch's DistributedSampler
 * (vt_dist_epoch_indices). idx and keys hold n each. The loader gets the first `use` samples, those of the
 * micro-batches the epoch trains (with accumulation a few more batches would be decoded, and their unreadable images
 * counted as skipped, though never trained), but the first `skip` (trained before a stop mid-epoch). */
static int epoch_start(const vt_train_opts *o, const vt_dist *dp, vt_loader *L, int64_t epoch, int *idx,
                       uint64_t *keys, int n, int use, int skip, vt_err *e) {
    int k;
    if (o->repeated_aug <= 0) {
        k = vt_dist_epoch_indices(dp, n, o->seed, epoch, idx, e);
        return k < 0 || vt_loader_start(L, idx + skip, (k < use ? k : use) - skip, 1, o->seed, epoch, e) < 0 ? -1 : 0;
    }
    vt_rng r;
    vt_rng_seed(&r, vt_rng_key(o->seed ^ 0xda7aULL, (uint64_t)epoch, UINT64_MAX));
    if ((k = vt_ra_sample(idx, n, o->repeated_aug, dp->size, dp->rank, &r, e)) < 0) return -1;
    for (int i = 0; i < k; i++)
        keys[i] = (uint64_t)idx[i] + (uint64_t)n * (uint64_t)vt_ra_repeat(i, n, o->repeated_aug, dp->size, dp->rank);
    return vt_loader_start_keyed(L, idx + skip, keys + skip, (k < use ? k : use) - skip, 1, o->seed, epoch, e) < 0
               ? -1
               : 0;
}

/* ---- data-parallel evaluation (each rank scores a contiguous slice of the validation set); the ranks' data ---- */

typedef struct {
    const vt_source *src;
    int lo;
} slice_ctx;

static int slice_get(void *ctx, int i, int chans, int min_side, vt_image *img, int *label, vt_err *e) {
    const slice_ctx *s = ctx;
    return s->src->get(s->src->ctx, s->lo + i, chans, min_side, img, label, e);
}

static const char *slice_name(void *ctx, int i) {
    const slice_ctx *s = ctx;
    return s->src->name ? s->src->name(s->src->ctx, s->lo + i) : NULL;
}

/* This rank's slice of a validation set: samples [lo, lo + src.n) of the whole, as a source whose ctx is sc. */
typedef struct {
    slice_ctx sc;
    vt_source src;
    int batch; /* its evaluation batch: the training batch (timm's validation default), at most the slice */
} val_slice;

/* Samples [⌊n·rank/size⌋, ⌊n·(rank+1)/size⌋) of src into *v (which must not move while v->src is used). */
static void source_slice(const vt_source *src, const vt_dist *dp, val_slice *v) {
    const int lo = (int)((int64_t)src->n * dp->rank / dp->size), hi = (int)((int64_t)src->n * (dp->rank + 1) / dp->size);
    v->sc = (slice_ctx){src, lo};
    v->src = *src;
    v->src.n = hi - lo;
    v->src.get = slice_get;
    v->src.name = src->name ? slice_name : NULL;
    v->src.ctx = &v->sc;
}

/* vt_evaluate of P over the ranks: each scores its slice vs (source_slice, with loader LV), the sums are reduced;
 * rank 0's parameters and buffers (e.g. BatchNorm running statistics) are broadcast first so that every slice sees one
 * model. A rank's failure (e.g. logits that are not finite) fails every rank. poison: --fault-nan-eval (evaluate). */
static int evaluate_ranks(const vt_model_cfg *c, vt_params *P, const val_slice *vs, const vt_transform *tf,
                          vt_loader *LV, vt_dist *dp, vt_eval_result *r, FILE *progress, int poison, vt_err *e) {
    const vt_source *part = &vs->src;
    const int base = vs->sc.lo;
    if (dp->size == 1) {
        if (evaluate(c, P, part, tf, vs->batch, 0, LV, r, progress, base, poison, e)) return -1;
        return r->n ? 0 : vt_seterr(e, "no readable image to evaluate");
    }
    if (vt_dist_broadcast(dp, P, NULL, NULL, 0, e)) return -1;
    vt_eval_result m = {0};
    const int rc = part->n > 0 ? evaluate(c, P, part, tf, vs->batch, 0, LV, &m, progress, base, poison, e) : 0;
    double v[5] = {m.loss * m.n, m.acc1 * m.n, m.acc5 * m.n, m.n, (double)m.skipped};
    if (vt_dist_agree(dp, rc, e) || vt_dist_sum(dp, v, 5, e)) return -1;
    if (v[3] == 0) { /* on every rank alike: rank 0 says it */
        dp->err_shared = 1;
        dp->err_reporter = dp->rank == 0;
        return vt_seterr(e, "no readable image to evaluate");
    }
    *r = (vt_eval_result){v[0] / v[3], round(v[1]) / v[3], round(v[2]) / v[3], (int)v[3], (int64_t)v[4], NULL, m.linears, m.int8_linears, m.bf16_runs};
    return 0;
}

/* Evaluates the EMA weights and prints them on out (NULL: not) as timm's train.py does (" (EMA)" lines). */
static int ema_eval(const vt_model_cfg *c, const vt_ema *ema, const val_slice *vs, const vt_transform *tf,
                    vt_loader *LV, vt_dist *dp, int64_t epoch, int poison, FILE *out, vt_err *e) {
    if (!ema->P) return 0;
    vt_eval_result ev = {0};
    if (evaluate_ranks(c, ema->P, vs, tf, LV, dp, &ev, NULL, poison, e)) return -1;
    if (out)
        fprintf(out, "Test (EMA): epoch %lld  Loss: %.4f  Acc@1: %.2f%%  Acc@5: %.2f%%\n", (long long)epoch, ev.loss,
               100 * ev.acc1, 100 * ev.acc5);
    return 0;
}

/* FNV-1a of folder f's class names and of each file's label and name (its last path component), in order. */
static uint64_t folder_hash(const vt_imagefolder *f) {
    uint64_t h = 0xcbf29ce484222325ULL;
    for (int i = 0; i < f->nclasses + f->n; i++) {
        const char *s = i < f->nclasses ? f->classes[i] : f->paths[i - f->nclasses];
        const char *base = strrchr(s, '/');
        if (i >= f->nclasses) h = (h ^ (uint64_t)(uint32_t)f->labels[i - f->nclasses]) * 0x100000001b3ULL;
        for (s = i >= f->nclasses && base ? base + 1 : s; *s; s++) h = (h ^ (uint8_t)*s) * 0x100000001b3ULL;
        h = (h ^ 0xff) * 0x100000001b3ULL; /* ends the name */
    }
    return h;
}

/* FNV-1a of dataset d's labels, then its pixels (Fashion-MNIST's, as this rank read them; 70,000 images: ~50 ms). */
static uint64_t dataset_hash(const vt_dataset *d) {
    uint64_t h = 0xcbf29ce484222325ULL;
    const size_t n[2] = {d->labels ? (size_t)d->n : 0, d->images ? (size_t)d->n * (size_t)d->h * (size_t)d->w : 0};
    const uint8_t *p[2] = {d->labels, d->images};
    for (int k = 0; k < 2; k++)
        for (size_t i = 0; i < n[k]; i++) h = (h ^ p[k][i]) * 0x100000001b3ULL;
    return h;
}

/* Under mpirun: 0 when this rank runs rank 0's vitc version, opened the data rank 0 did (image and class counts; a
 * folder's class names and its files' names and labels, Fashion-MNIST's labels and pixels) and runs its settings
 * (those a checkpoint records), else -1 naming the difference. The ranks read the data each on its own machine, and
 * one epoch order shards it: other data would train on other images than the run says, or fail inside MPI; other
 * settings would step apart, or hang. */
static int same_data(const vt_model_cfg *c, const vt_params *P, const vt_train_opts *o, const vt_dist *dp,
                     const vt_data *d, const char *data, vt_err *e) {
    enum { VERSION = (VITC_VERSION_MAJOR * 1000 + VITC_VERSION_MINOR) * 1000 + VITC_VERSION_PATCH };
    int64_t mine[7] = {d->train.n, d->val.n, d->train.nclasses, 0, 0, 0, VERSION}, ref[7];
    mine[3] = (int64_t)(d->folder ? folder_hash(&d->f_train) : dataset_hash(&d->fm_train));
    mine[4] = (int64_t)(d->folder ? folder_hash(&d->f_val) : dataset_hash(&d->fm_val));
    run_setting s[RUN_SETTINGS]; /* and the settings a checkpoint records, but the data's path (each machine's own) */
    const int n = run_settings(c, o, d->train.n, s);
    uint64_t h = 0xcbf29ce484222325ULL;
    for (int i = -1; i < n + P->n; i++) /* the model's name, the settings, every parameter's name and size */
        for (const char *p = i < 0 ? c->name : i >= n ? P->t[i - n]->name : strcmp(s[i].key, "data") ?
                                   setting_value(&s[i]) : "";; p++) {
            h = (h ^ (uint8_t)*p) * 0x100000001b3ULL;
            if (i >= n && !*p) h = (h ^ (uint64_t)P->t[i - n]->numel) * 0x100000001b3ULL;
            if (!*p) break;
        }
    mine[5] = (int64_t)h;
    memcpy(ref, mine, sizeof ref);
    if (vt_dist_bcast_i64(dp, ref, 7, e)) return -1;
    if (mine[6] != ref[6]) /* (an op's numbers may differ between versions: the ranks would train apart) */
        return vt_seterr(e, "it runs vitc %d.%d.%d and rank 0 vitc %d.%d.%d: every rank must run the same vitc build",
                         VITC_VERSION_MAJOR, VITC_VERSION_MINOR, VITC_VERSION_PATCH, (int)(ref[6] / 1000000),
                         (int)(ref[6] / 1000 % 1000), (int)(ref[6] % 1000));
    static const char *const what[] = {"training images", "validation images", "classes", "training", "validation"};
    for (int i = 0; i < 5; i++) {
        if (mine[i] == ref[i]) continue;
        if (i < 3)
            return vt_seterr(e, "its data (%s) has %lld %s and rank 0's %lld: every rank must read the same dataset",
                             d->folder ? data : "Fashion-MNIST", (long long)mine[i], what[i], (long long)ref[i]);
        return vt_seterr(e, "its data (%s) has the counts of rank 0's but other %s %s: every rank must read the "
                         "same dataset", d->folder ? data : "Fashion-MNIST", what[i],
                         d->folder ? "files (names or classes)" : "images (pixels or labels)");
    }
    if (mine[5] != ref[5])
        return vt_seterr(e, "its training settings (model, options, recipe, seed, schedule) differ from rank 0's: "
                         "every rank must run the same command");
    return 0;
}

/* ---- the training loop ---- */

/* The longest run folder name: its files' names ("/weights_best.safetensors", a writer's ".vitc-HOST-PID-XXXXXX"
 * temporary, under 64 bytes) must fit the 4096-byte path buffers. */
#define RUN_DIR_MAX 4000

/* A training run's state, shared by the phases of vt_train: the model and options it trains, its data, model,
 * optimiser and loaders, its position, its files and its timing. run_close frees what it holds, opened or not. */
typedef struct {
    vt_model_cfg tc;         /* the model's training form: `vitc deploy` merges re-parameterised blocks */
    const vt_model_cfg *c;   /* &tc */
    vt_train_opts own;       /* the options given, the data folder's path made absolute once it is open */
    const vt_train_opts *o;  /* &own */
    char data_abs[PATH_MAX]; /* that absolute path */
    vt_dist one, *dp;        /* the ranks: o->dist, else one (this process alone) */
    int lead;                /* rank 0 alone prints, writes the run folder and holds its lock */
    FILE *out;               /* progress lines: o->log on rank 0, NULL on the others */
    vt_data d;
    vt_params *P;
    vt_adamw opt;
    vt_ema ema;
    vt_mixup mix;
    train_graph t;
    vt_dist_grads *gb;
    vt_loader *L, *LV;       /* training and validation batches */
    val_slice vs;            /* this rank's slice of the validation set */
    vt_tf_params deit;
    uint64_t *keys;          /* the loader's draw keys under repeated augmentation */
    int *idx, *lab;          /* an epoch's image order (N); a batch's labels (B) */
    int lock;                /* the run folder's lock (rank 0); -1: none held */
    int workers;             /* loader threads (per rank) */
    int N, B, A, spe;        /* training images; batch (per rank); micro-batches per optimiser step, per epoch */
    train_state st;
    int resume_here;         /* --resume names the run folder itself */
    char ckpt[4096], wpath[4096], bpath[4096]; /* the run folder's checkpoint, weights and best weights */
    char resumed[4096];      /* the resumed checkpoint */
    const char *good;        /* the last good checkpoint, named when a run stops */
    double clock0;           /* the resumed run's seconds so far */
    vt_sched sched;
    double t0;               /* metrics' seconds count from t0 */
    int64_t epoch_imgs;      /* an epoch's training images over all ranks */
    double train_s;          /* seconds spent in the epochs' training steps */
    int64_t steps_run;       /* optimiser steps this process has run */
    int curves_failed;       /* the last epoch's curves.png could not be drawn (warned) */
} train_run;

/* printf onto r's progress stream (rank 0's o->log; nothing elsewhere). */
__attribute__((format(printf, 2, 3))) static void say(const train_run *r, const char *fmt, ...) {
    if (!r->out) return;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(r->out, fmt, ap);
    va_end(ap);
}

/* What an epoch's training steps pass on to its evaluation and record. */
typedef struct {
    double lsum;     /* the sum of the micro-batches' losses */
    int64_t correct; /* training images classified right, over all ranks */
    double ep_s;     /* the epoch's training seconds */
    int tty;         /* the progress went to a terminal: the validation shows its own there */
    int stop;        /* a stop was asked at the epoch's last step: the run stops once the epoch is written */
} epoch_tally;

/* Refuses options run o of model c cannot train (before anything is opened or written); 0 when they pass. */
static int check_opts(const vt_model_cfg *c, const vt_train_opts *o, vt_err *e) {
    if (o->epochs <= 0 || o->batch <= 0 || !(o->lr > 0 && o->lr < INFINITY))
        return vt_seterr(e, "epochs, batch size and lr must be > 0 (and finite)");
    /* the CLI's ranges, for callers of the library: a NaN warm-up length would reach an integer cast, a negative
     * rate would climb the loss */
    const double ranged[5][3] = {{o->min_lr, 0, 10}, {o->warmup_lr, 0, 10}, {o->warmup_epochs, 0, 1e6},
                                 {o->weight_decay, 0, 1e3}, {o->clip_grad, 0, 1e30}};
    static const char *const rname[5] = {"min_lr", "warmup_lr", "warmup_epochs", "weight_decay", "clip_grad"};
    for (int i = 0; i < 5; i++)
        if (!(ranged[i][0] >= ranged[i][1] && ranged[i][0] <= ranged[i][2]))
            return vt_seterr(e, "%s is %g: it must lie in [%g, %g]", rname[i], ranged[i][0], ranged[i][1],
                             ranged[i][2]);
    if (!(o->smoothing >= 0 && o->smoothing < 1))
        return vt_seterr(e, "smoothing is %g: it must lie in [0, 1)", o->smoothing);
    if (c->arch.num_classes < 2)
        return vt_seterr_code(e, VT_E_USAGE, "%s has %d output%s: a classifier to train needs two or more "
                              "(--num-classes)", c->name, c->arch.num_classes, c->arch.num_classes == 1 ? "" : "s");
    if (c->arch.aux_head) /* (only Refiner's _dense models have one) */
        return vt_seterr_code(e, VT_E_USAGE, "%s evaluates as its class logits + 0.5 x the max over tokens of its "
                              "aux_head, which only token labelling trains, and vitc does not implement it: its "
                              "validation and weights would carry an untrained head. Train %.*s (refiner_s.yaml's "
                              "plain-label form; from an official _dense checkpoint: tools/convert_checkpoint.py "
                              "--drop aux_head)", c->name, (int)(strlen(c->name) - (strstr(c->name, "_dense") ? 6 : 0)),
                              c->name);
    if (run_epochs(o) > VT_EPOCHS_MAX)
        return vt_seterr_code(e, VT_E_USAGE, "at most %d epochs (here %d and %d of cooldown)", VT_EPOCHS_MAX,
                              o->epochs, run_epochs(o) - o->epochs); /* (--epochs alone is bounded where given) */
    const char *text[2][2] = {{"the data path", o->data}, {"the model options", o->model_options}};
    for (int i = 0; i < 2; i++) { /* recorded in the checkpoints' JSON header, which must be UTF-8: refused now */
        size_t bad = 0;
        if (text[i][1] && !vt_utf8_valid((const uint8_t *)text[i][1], strlen(text[i][1]), &bad))
            return vt_seterr(e, "%s '%s' is not valid UTF-8 (byte 0x%02x at offset %zu), and checkpoints record it "
                             "in JSON: give it in UTF-8 (e.g. through a symbolic link)", text[i][0], text[i][1],
                             (unsigned char)text[i][1][bad], bad);
    }
    if (o->workers < 0) return vt_seterr(e, "workers must be >= 0 (0: the default)");
    if (!o->run_dir || !o->run_dir[0]) return vt_seterr(e, "empty run folder name (--out)");
    if (o->resume && !o->resume[0]) return vt_seterr(e, "empty run folder name (--resume)");
    /* the run's files are named in 4096-byte buffers: a folder name that would cut them short is refused here */
    const char *dirs[2][2] = {{"--out", o->run_dir}, {"--resume", o->resume}};
    for (int i = 0; i < 2; i++)
        if (dirs[i][1] && strlen(dirs[i][1]) > RUN_DIR_MAX)
            return vt_seterr(e, "the run folder name (%s) is %zu bytes long; at most %d leave room for its files' "
                             "names", dirs[i][0], strlen(dirs[i][1]), RUN_DIR_MAX);
    if (o->resume && o->init_from)
        return vt_seterr(e, "--resume and --init-from contradict each other: a resumed run continues its checkpoint");
    return 0;
}

/* Opens this rank's data, model (fine-tuned from o->init_from on rank 0), train graph, optimiser, EMA, loaders and
 * buffers; stops at the first failure, which run_close cleans up. Nothing here meets the other ranks. */
static int run_open(train_run *r, vt_err *e) {
    const vt_model_cfg *c = r->c;
    const vt_train_opts *o = r->o;
    vt_dist *dp = r->dp;
    vt_data *d = &r->d;
    int rc = recipe_deit(o, c->arch.img_size, &r->deit, e);
    if (rc) return rc;
    /* a folder holding another run is refused before the data and model are set up (an image folder's scan can take
     * minutes); the check is made again under the folder's lock (run_folder), where it decides */
    const int folder = o->data && strcmp(o->data, "fashion-mnist") != 0;
    if (r->lead && (check_run_dir(c, o, e) || (folder && out_inside_data(o->run_dir, o->data, e)))) return -1;
    vt_err de = {0};
    if (vt_data_open(c, o->data, 1, o->augment, o->recipe && r->deit.size ? &r->deit : NULL, o->train_subset,
                     o->test_subset, d, &de))
        return vt_seterr(e, "%s%s", de.msg, o->data_recorded && access(o->data, F_OK) != 0 ? " (the data path the "
                         "resumed checkpoint records: give --data for the copy on this machine)" : "");
    /* a folder is recorded by its absolute path (in UTF-8, as checkpoints need), so that a resume finds the same data
     * from any working directory */
    size_t bad_at = 0;
    if (d->folder && realpath(o->data, r->data_abs) &&
        vt_utf8_valid((const uint8_t *)r->data_abs, strlen(r->data_abs), &bad_at))
        r->own.data = r->data_abs;
    if (check_readable(d, c->arch.in_chans, o->data, e)) return -1;
    r->workers = o->workers > 0 ? o->workers : vt_loader_default_workers();
    source_slice(&d->val, dp, &r->vs);
    /* a fixed 250 before: a 384 px fine-tune at batch 1 peaked at 3.2 GB in its evaluation of 4 images, computed 250 */
    r->vs.batch = o->batch < r->vs.src.n ? o->batch : r->vs.src.n > 0 ? r->vs.src.n : 1;
    /* each rank's shard of an epoch (DistributedSampler's ⌈n/ranks⌉, or RASampler's ⌊⌊n/256⌋·256/ranks⌋) in
     * micro-batches of B (a batch is per rank); each optimiser step takes A of them (the schedule counts optimiser
     * steps); checked before the graph is built (B·A in 64 bits: both are large enough to wrap an int) */
    const int N = r->N = d->train.n;
    const int nsamp = o->repeated_aug > 0 ? vt_ra_count(N, dp->size) : (int)(((int64_t)N + dp->size - 1) / dp->size);
    const int B = r->B = o->batch, A = r->A = o->accum_steps > 0 ? o->accum_steps : 1;
    if ((int64_t)B * A > nsamp)
        return vt_seterr_code(e, VT_E_USAGE, "batch size %d × %d accumulation steps is larger than the %d image%s an "
                              "epoch visits%s%s", B, A, nsamp, nsamp == 1 ? "" : "s", dp->size > 1 ? " per rank" : "",
                              o->repeated_aug > 0 ? " (repeated augmentation visits ⌊n/256⌋·256 of n: "
                                                    "--no-repeated-aug visits all)" : "");
    r->spe = nsamp / (B * A) * A;
    const int64_t ospe = r->spe / A;
    if (o->warmup_epochs > 0 && (int64_t)(o->warmup_epochs * (double)ospe) < 1)
        return vt_seterr_code(e, VT_E_USAGE, "a warm-up of %g epochs is less than one of the %lld optimiser steps an "
                              "epoch makes: no step would warm up; give --warmup-epochs 0 (none) or at least %g",
                              o->warmup_epochs, (long long)ospe, 1.0 / (double)ospe);
    if (recipe_check(c, o, &r->mix, e) || !(r->P = vt_params_new(e))) return -1;
    vt_params *P = r->P;
    const int pt = c->arch.patch, pos_h = pt > 0 ? c->arch.img_size / pt : 0; /* a ViT's patch grid (H x W too) */
    const int pos_w = pt > 0 ? vt_arch_width(&c->arch) / pt : 0;
    if (vt_model_init_params(c, P, o->seed, e) ||
        (o->init_from && r->lead && /* then broadcast */
         vt_adapt_load(P, c->arch.num_classes, c->arch.in_chans, pos_h, pos_w, o->init_from, r->out, e)) ||
        build_train(c, P, o->batch, (float)o->smoothing, vt_mixup_enabled(&r->mix), o->sync_bn ? dp : NULL, &r->t,
                    e) ||
        (o->recipe && vt_recipe_decay(o->recipe, P)) ||
        vt_adamw_init(&r->opt, P, 0.9f, 0.999f, 1e-8f, (float)o->weight_decay, e) ||
        (o->model_ema && vt_ema_init(&r->ema, P, o->model_ema_decay, e)) ||
        !(r->gb = vt_dist_grads_new(dp, r->t.g, e)) ||
        !(r->L = vt_loader_new(&d->train, &d->train_tf, o->batch, r->workers, PREFETCH, VT_BAD_REPLACE, e)) ||
        (r->vs.src.n > 0 &&
         !(r->LV = vt_loader_new(&r->vs.src, &d->eval_tf, r->vs.batch, r->workers, PREFETCH, VT_BAD_DROP, e))))
        return -1;
    int bn = 0; /* a BatchNorm among the parameters */
    for (int i = 0; i < P->n && !bn; i++) bn = vt_is_running_var(P->t[i]->name);
    if (o->sync_bn && dp->size > 1 && !bn)
        say(r, "Note: --sync-bn: %s has no BatchNorm, nothing to synchronise\n", c->name);
    vt_loader_set_warnings(r->L, o->warn);
    if (r->LV) vt_loader_set_warnings(r->LV, o->warn);
    if (dp->rank > 0) { /* the ranks after the first say whose warnings they are */
        char tag[24];
        snprintf(tag, sizeof tag, "rank %d: ", dp->rank);
        vt_loader_set_tag(r->L, tag);
        if (r->LV) vt_loader_set_tag(r->LV, tag);
    }
    if (!(r->idx = malloc(sizeof(int) * (size_t)N)) || !(r->keys = malloc(sizeof(uint64_t) * (size_t)N)) ||
        !(r->lab = malloc(sizeof(int) * (size_t)B)))
        return vt_seterr_code(e, VT_E_NOMEM, "out of memory");
    return 0;
}

/* Checks the checkpoint to resume and the ranks' agreement, then makes, locks and checks the run folder on rank 0
 * (resuming there a run resumed in place). Entered with run_open's rc, failed or not: every rank meets the others. */
static int run_folder(train_run *r, int rc, vt_err *e) {
    const vt_model_cfg *c = r->c;
    const vt_train_opts *o = r->o;
    vt_dist *dp = r->dp;
    const int lead = r->lead, A = r->A, spe = r->spe;
    /* the run folder is made and written once the options, data, model and the checkpoint to resume (from another
     * folder; one resumed in place is read under the folder's lock, before anything is written there) have passed
     * their checks: a refused run leaves no folder behind, and a refused resume leaves its folder as it was */
    r->st = (train_state){.best_epoch = -1, .images = rc == 0 ? r->d.train.n : 0,
                          .files = rc == 0 && r->d.folder ? folder_hash(&r->d.f_train) : 0};
    const int resume_here = r->resume_here = o->resume && same_dir(o->resume, o->run_dir);
    if (rc == 0 && lead && o->resume && !resume_here &&
        ((r->d.folder && check_classes(o->resume, &r->d.f_train, o->data, e)) ||
         resume_run(c, o, r->P, &r->opt, r->ema.P, &r->st, dp->size, spe / A, e)))
        rc = -1;
    /* every rank has passed its checks (its data, the model, a file to fine-tune from) and holds the data rank 0 holds
     * before rank 0 writes the run folder: a run refused on any rank leaves none behind */
    if (dp->size > 1 && (rc = vt_dist_agree(dp, rc, e)) == 0)
        rc = vt_dist_agree(dp, same_data(c, r->P, o, dp, &r->d, o->data, e), e);
    if (rc == 0 && o->init_from) say(r, "Fine-tuning from %s\n", o->init_from);
    if (rc == 0 && lead &&
        (make_dirs(o->run_dir, e) || (r->lock = lock_run(o->run_dir, e)) < 0 || stale_temps(o->run_dir, o->warn) ||
         check_run_dir(c, o, e) ||
         (resume_here && ((r->d.folder && check_classes(o->resume, &r->d.f_train, o->data, e)) ||
                          resume_run(c, o, r->P, &r->opt, r->ema.P, &r->st, dp->size, spe / A, e)))))
        rc = -1;
    if (rc == 0) /* the weights it writes are the data's, whatever a file it started from was trained on */
        r->P->folder = r->d.folder;
    if (rc == 0 && r->ema.P) r->ema.P->folder = r->d.folder;
    return rc;
}

/* The epoch (from 1) a run's weights_best at path records (VT_EPOCH_KEY); 0 when it has none or cannot be read. */
static long long best_epoch_of(const char *path) {
    vt_st_file f;
    vt_err e = {0};
    if (access(path, F_OK) != 0 || vt_st_open(path, &f, &e)) return 0;
    const char *v = vt_st_meta(&f, VT_EPOCH_KEY);
    char *end = NULL;
    long long n = v ? strtoll(v, &end, 10) : 0;
    if (!v || *end != '\0' || n < 0) n = 0; /* before the close frees v */
    vt_st_close(&f);
    return n;
}

/* Rank 0's notes on the run to come and its record in the run folder: command, classes, recipe, and what a resume
 * carries on (best weights, metrics rows). Entered with run_folder's rc, failed or not. */
static int run_record(train_run *r, int rc, vt_err *e) {
    const vt_train_opts *o = r->o;
    const vt_data *d = &r->d;
    const train_state *st = &r->st;
    const int lead = r->lead, resume_here = r->resume_here;
    /* a run resumed in its folder after its last epoch (resume_run refuses that into another folder) trains and
     * writes nothing but metrics rows past its checkpoint dropped (rank 0 knows it here, every rank after the
     * broadcast in run_sync): said, exit 0, so that a script may resume until a run is done */
    const int finished = rc == 0 && o->resume && st->epoch >= run_epochs(o);
    if (rc == 0 && !finished) { /* about the run to come (rank 0's lines): none when nothing is left to train */
        if (o->train_subset > d->train.n)
            say(r, "Note: --train-subset %d is more than the %d training images: training on all of them\n",
                o->train_subset, d->train.n);
        if (o->test_subset > d->val.n)
            say(r, "Note: --test-subset %d is more than the %d test images: evaluating all of them\n", o->test_subset,
                d->val.n);
        if (o->notice) say(r, "%s\n", o->notice);
        if (r->out) fflush(r->out);
    }
    if (rc == 0 && lead && !resume_here && clear_run_dir(o->run_dir, e)) rc = -1;
    char cmd_path[4096], cls_path[4096];
    snprintf(cmd_path, sizeof cmd_path, "%s/command.txt", o->run_dir);
    snprintf(cls_path, sizeof cls_path, "%s/classes.json", o->run_dir);
    if (rc == 0 && lead && !finished &&
        (command_record(o, cmd_path, e) || (d->folder && vt_imagefolder_write_classes(&d->f_train, cls_path, e)) ||
         recipe_record(o, e)))
        rc = -1;
    snprintf(r->ckpt, sizeof r->ckpt, "%s/checkpoint.safetensors", o->run_dir);
    snprintf(r->wpath, sizeof r->wpath, "%s/weights.safetensors", o->run_dir);
    snprintf(r->bpath, sizeof r->bpath, "%s/weights_best.safetensors", o->run_dir);
    if (finished)
        say(r, "Nothing to train: %s/checkpoint.safetensors is at epoch %lld, the end of a run of %d epoch%s; its "
            "weights are in %s (raise --epochs to continue it)\n", o->resume, (long long)st->epoch, run_epochs(o),
            run_epochs(o) == 1 ? "" : "s", o->run_dir);
    else if (rc == 0 && o->resume && st->part_steps)
        say(r, "Resumed from %s/checkpoint.safetensors at epoch %lld, step %lld, after batch %lld of %d (where it was "
            "stopped)\n", o->resume, (long long)st->epoch, (long long)st->step, (long long)(st->part_steps * r->A),
            r->spe);
    else if (rc == 0 && o->resume)
        say(r, "Resumed from %s/checkpoint.safetensors at epoch %lld, step %lld\n", o->resume, (long long)st->epoch,
            (long long)st->step);
    if (rc == 0 && lead && o->resume && !finished && st->best_epoch >= 0) { /* the best weights come along */
        char src[4096];
        snprintf(src, sizeof src, "%s/weights_best.safetensors", o->resume);
        const long long held = best_epoch_of(src); /* a run stopped between weights_best and its checkpoint */
        if (held > 0 && held != st->best_epoch + 1) {
            say(r, "Note: %s holds epoch %lld's weights (a run stopped before its checkpoint), not the best epoch "
                "%lld's: %s; the next epoch above Acc@1 %.2f%% writes %s\n", src, held - 1, (long long)st->best_epoch,
                resume_here ? "removed" : "not taken", 100 * st->best_acc1, r->bpath);
            if (resume_here && unlink(src) != 0)
                rc = vt_seterr_code(e, VT_E_IO, "cannot remove %s: %s", src, strerror(errno));
        } else if (access(src, F_OK) != 0) {
            say(r, "Note: %s is missing; the next epoch above Acc@1 %.2f%% (epoch %lld's) writes %s\n", src,
                100 * st->best_acc1, (long long)st->best_epoch, r->bpath);
        } else if (!resume_here && vt_copy_file(src, r->bpath, e)) {
            rc = -1;
        }
    }
    /* rows of epochs this run will (re)train would repeat: a crash between the row and the checkpoint, a resume from
     * an earlier checkpoint; a run resumed from another folder carries that run's rows up to its checkpoint */
    if (rc == 0 && lead &&
        (resume_here ? vt_metrics_truncate(o->run_dir, (double)st->epoch, e) /* none to drop: untouched */
         : o->resume ? vt_metrics_copy(o->resume, o->run_dir, (double)st->epoch, e)
                     : 0))
        rc = -1;
    return rc;
}

/* Copies rank 0's path (a string of at most cap bytes) to every rank. */
static int bcast_path(const vt_dist *dp, char *path, size_t cap, vt_err *e) {
    char *b = path;
    size_t n = strlen(path) + 1;
    if (vt_dist_bcast_bytes(dp, &b, &n, e)) return -1;
    if (b != path) {
        snprintf(path, cap, "%s", b ? b : "");
        free(b);
    }
    return 0;
}

/* Fails every rank when one failed (rc, run_record's); else gives every rank rank 0's model, optimiser, EMA,
 * position (step, epoch) and checkpoint paths (those a stop names). */
static int run_sync(train_run *r, int rc, vt_err *e) {
    vt_dist *dp = r->dp;
    train_state *st = &r->st;
    /* the checkpoints the messages name are rank 0's, which alone writes them (another rank's --out may differ); the
     * one a run stopped by a NaN resumes from: this run's once it has written an epoch, before that the one it
     * resumed (another folder's, or this one's) */
    if (r->o->resume) snprintf(r->resumed, sizeof r->resumed, "%s/checkpoint.safetensors", r->o->resume);
    r->clock0 = rc == 0 && r->lead && r->o->resume ? vt_metrics_last_seconds(r->o->run_dir) : 0.0; /* goes on */
    if (rc == 0 && r->lead) r->clock0 += st->part_seconds; /* the part of an epoch trained before a stop */
    int64_t pos[3] = {st->step, st->epoch, st->part_steps}; /* (the rest of the part: rank 0's record alone) */
    if ((rc = vt_dist_agree(dp, rc, e)) || (rc = vt_dist_broadcast(dp, r->P, &r->opt, pos, 3, e)) ||
        (r->ema.P && (rc = vt_dist_broadcast(dp, r->ema.P, NULL, NULL, 0, e))) ||
        (rc = bcast_path(dp, r->ckpt, sizeof r->ckpt, e)) || (rc = bcast_path(dp, r->resumed, sizeof r->resumed, e)))
        return rc;
    r->good = r->resumed[0] ? r->resumed : "(none yet)";
    st->step = pos[0];
    st->epoch = pos[1];
    st->part_steps = pos[2];
    return 0;
}

/* Says what an image-folder run trains on (rank 0), and sets the learning-rate schedule, the checkpoint a stop names
 * and the clock of the epochs to come. */
static void run_begin(train_run *r) {
    const vt_train_opts *o = r->o;
    const vt_data *d = &r->d;
    if (d->folder) {
        say(r, "Data: %s: %d training images, %d validation images, %d classes (classes.json); %d loader thread%s%s\n",
            o->data, d->f_train.n, d->f_val.n, d->f_train.nclasses, r->workers, r->workers == 1 ? "" : "s",
            r->dp->size > 1 ? " per rank" : "");
        if (d->f_train.unread + d->f_val.unread > 0)
            say(r, "Data: %d training and %d validation files left out: .tif, .tiff and .webp images, which "
                "torchvision's ImageFolder reads, vitc does not decode\n", d->f_train.unread, d->f_val.unread);
        char tf[512];
        if (d->deit_on) vt_tf_params_format(&d->deit, tf, sizeof tf);
        say(r, "Train transform: %s%s\n", d->deit_on ? "DeiT " : o->augment ? "crop + flip" : "eval (no augmentation)",
            d->deit_on ? tf : "");
    } else if (recipe_wants_deit(o->recipe)) { /* recipe.json records them, as the recipe holds them */
        say(r, "Train transform: %s: the recipe's DeiT transforms (RandAugment, RandomErasing, RandomResizedCrop) run "
            "on image folders only\n", o->augment ? "crop + flip" : "eval (no augmentation)");
    }
    /* the cosine spans the run's epochs but the cooldown (after the warm-up, with warmup_prefix), in optimiser steps */
    const int64_t ospe = r->spe / r->A, wsteps = (int64_t)(o->warmup_epochs * ospe);
    r->sched = (vt_sched){o->lr, o->warmup_lr, o->min_lr, wsteps,
                          (int64_t)o->epochs * ospe - (o->warmup_prefix ? wsteps : 0), o->warmup_prefix, ospe,
                          (vt_sched_update)o->sched_update};
    r->t0 = now_s() - r->clock0; /* metrics' seconds: since the start of the run, across resumes */
    r->epoch_imgs = (int64_t)r->spe * r->B * r->dp->size; /* over all ranks */
    r->train_s = 0.0;
    r->steps_run = 0;
}

/* Micro-batch i of the epoch: loaded, mixed, forward and backward, and the optimiser step (at lr) that ends each A
 * of them; its loss (the ranks' mean) in *loss, the images it classified right (all ranks') in *correct, and in
 * *stop whether a rank's o->stop flag was up (summed with the loss: every rank sees the same). */
static int train_step(train_run *r, int i, double lr, double *loss, int64_t *correct, int *stop, vt_err *e) {
    const vt_train_opts *o = r->o;
    vt_dist *dp = r->dp;
    train_graph *t = &r->t;
    train_state *st = &r->st;
    const int B = r->B, A = r->A, j = i % A; /* micro-batch j of the optimiser step */
    int rc = 0;
    if (o->fault_batch_step == st->step && j == 0 && dp->rank == dp->size - 1)
        rc = vt_seterr(e, "the batch of step %lld failed (--fault-batch-step)", (long long)st->step);
    else if ((rc = vt_loader_next(r->L, t->x->data, r->lab, e)) != B) /* -1: the loader's error is in e */
        rc = rc < 0 ? -1 : vt_seterr(e, "the loader ended the epoch early");
    else {
        for (int b = 0; b < B; b++) t->labels->data[b] = (float)r->lab[b];
        rc = mix_batch(&r->mix, t, r->lab, vt_mixup_key(o->seed, st->step * A + j, dp->rank), e); /* after the loader */
    }
    /* a batch that failed on one rank stops every rank here, before the step's collectives, where the others would
     * wait for it forever */
    if ((rc = vt_dist_agree(dp, rc, e))) return rc;
    if (o->fault_nan_step == st->step && dp->rank == dp->size - 1) t->x->data[0] = NAN; /* the last rank only */
    /* drop-path masks of this micro-batch (and rank: ranks hold different samples) */
    t->g->seed = ((o->seed + 1) * 0x9e3779b97f4a7c15ULL ^ (uint64_t)(st->step * A + j)) +
                 (uint64_t)dp->rank * 0xd1b54a32d192ed03ULL;
    vt_graph_forward(t->g);
    int64_t c0 = 0;
    const int asked = (o->stop && o->stop->asked) || (o->fault_stop_step == st->step && dp->rank == dp->size - 1);
    double l0 = 0.0, red[3] = {t->loss->data[0], 0.0, asked};
    score(t->logits->data, r->lab, B, r->c->arch.num_classes, &l0, &c0, NULL);
    red[1] = (double)c0;
    if ((rc = vt_dist_sum(dp, red, 3, e))) return rc; /* every rank sees the same loss (and NaN) and stop */
    *loss = red[0] / dp->size;
    *stop = red[2] > 0;
    if (!isfinite(*loss)) {
        rc = vt_seterr(e, "loss is %s at step %lld (epoch %lld, batch %d of %d, as the progress lines count); "
                       "stopped. The last good checkpoint is %s", isnan(*loss) ? "NaN" : "infinite",
                       (long long)st->step, (long long)st->epoch, i + 1, r->spe, r->good);
        vt_dist_agree(dp, rc, e);
        return rc;
    }
    if ((rc = accum_backward(t, r->P, j, A, r->gb, e))) return rc;
    if (j == A - 1) { /* the optimiser step (one place) */
        for (int k = 0; o->fault_grad_step == st->step && k < r->P->n; k++)
            if (r->P->t[k]->kind == VT_PARAM && r->P->t[k]->grad) { /* every rank: their gradients are equal */
                r->P->t[k]->grad[0] = 1e30f;
                break;
            }
        if (o->clip_grad > 0) vt_clip_grad_norm(r->P, o->clip_grad);
        vt_adamw_step(&r->opt, (float)lr);
        if (r->ema.P) vt_ema_update(&r->ema, r->P);
        st->step++;
        r->steps_run++;
    }
    *correct = (int64_t)red[1];
    return 0;
}

/* -1 with the reason in e when the parameters, AdamW's moments or the EMA hold NaN or Inf `when` (e.g. "after epoch
 * 3's training"), before the files of `what` (e.g. "that epoch") are written: a non-finite gradient that no loss showed
 * (an op that dropped a NaN) must not reach a checkpoint; nor may AdamW's moments, which a resume would refuse (a
 * gradient element above about 5.8e20 makes v Inf, and the parameter then no longer moves while staying finite). */
static int check_state(const train_run *r, const char *when, const char *what, vt_err *e) {
    int64_t at = 0;
    const vt_tensor *bad = vt_params_first_nonfinite(r->P, &at);
    if (bad)
        return vt_seterr(e, "%s holds NaN or Inf %s (the loss stayed finite); stopped before writing %s. The last "
                         "good checkpoint is %s", bad->name, when, what, r->good);
    for (int k = 0; k < vt_adamw_nstate(&r->opt); k++) {
        char name[VT_NAMELEN + 16];
        int64_t numel = 0;
        const float *m = vt_adamw_state(&r->opt, k, name, (int)sizeof name, &numel, NULL);
        if (vt_first_nonfinite(m, numel) >= 0)
            return vt_seterr(e, "the optimiser state %s holds NaN or Inf %s (a gradient too large for AdamW's squared "
                             "average; --clip-grad bounds it); stopped before writing %s. The last good checkpoint "
                             "is %s", name, when, what, r->good);
    }
    if (r->ema.P && (bad = vt_params_first_nonfinite(r->ema.P, &at)))
        return vt_seterr(e, "the EMA's %s holds NaN or Inf %s; stopped before writing %s. The last good checkpoint is "
                         "%s", bad->name, when, what, r->good);
    return 0;
}

/* A stop asked (o->stop) at the end of micro-batch `done` of epoch r->st.epoch, mid-epoch: rank 0 writes the
 * checkpoint of that point, holding the epoch's part trained (its tally so far, and skipped0, the images skipped
 * before this process's part), which a resume goes on from; 1 once written, -1 on every rank when that failed. */
static int stop_mid_epoch(train_run *r, int done, const epoch_tally *part_et, int64_t skipped0, vt_err *e) {
    char when[96];
    snprintf(when, sizeof when, "at step %lld, where a stop was asked", (long long)r->st.step);
    double skipped = (double)vt_loader_skipped(r->L);
    int rc = vt_dist_sum(r->dp, &skipped, 1, e); /* on every rank (the stop is agreed), whatever its state's check */
    if (rc == 0) rc = check_state(r, when, "its checkpoint", e);
    train_state part = r->st;
    part.part_steps = done / r->A;
    part.part_correct = part_et->correct;
    part.part_skipped = skipped0 + (int64_t)skipped;
    part.part_loss = part_et->lsum;
    part.part_seconds = part_et->ep_s;
    vt_err we = {0};
    if (rc == 0 && r->lead && save_checkpoint(r->ckpt, r->c, r->o, r->P, &r->opt, r->ema.P, &part, r->dp->size, &we))
        rc = vt_seterr_from(e, &we, "%.700s; the stop's checkpoint was not written. The last good checkpoint is %s",
                            we.msg, r->good);
    if ((rc = vt_dist_agree(r->dp, rc, e))) return rc;
    say(r, "Stopped as asked at epoch %lld, batch %d of %d (step %lld): %s holds the run there; train with --resume "
        "%s to go on from that batch\n", (long long)r->st.epoch, done, r->spe, (long long)r->st.step, r->ckpt,
        r->o->run_dir);
    return 1;
}

/* Trains epoch r->st.epoch, its micro-batches in this rank's order with progress lines (from where a stop left it,
 * when resumed there), then refuses parameters, AdamW moments or EMA weights gone non-finite; what its evaluation and
 * record need in *et. Returns 1 when a stop asked mid-epoch ended it (stop_mid_epoch). */
static int train_epoch(train_run *r, epoch_tally *et, vt_err *e) {
    const vt_train_opts *o = r->o;
    vt_dist *dp = r->dp;
    const int spe = r->spe, A = r->A, i0 = (int)(r->st.part_steps * A); /* the micro-batches trained before a stop */
    int rc;
    rc = epoch_start(o, dp, r->L, r->st.epoch, r->idx, r->keys, r->N, spe * r->B, i0 * r->B, e);
    if ((rc = vt_dist_agree(dp, rc, e))) return rc;
    const double before = r->st.part_seconds; /* (not this process's time) */
    double lsum = r->st.part_loss, tbatch = now_s(), tep = tbatch - before;
    int64_t correct = r->st.part_correct;
    const int64_t skipped0 = r->st.part_skipped; /* (rank 0's record) */
    r->st.part_steps = r->st.part_correct = r->st.part_skipped = 0; /* the next epoch starts at its beginning */
    r->st.part_loss = r->st.part_seconds = 0.0;
    int last_i = i0, stop = 0; /* steps of this epoch done at the last progress line; a stop asked */
    vt_progress pg; /* a terminal gets one line redrawn, a pipe a line each log_every steps */
    vt_progress_start(&pg, r->out, "Train", "img", spe, o->log_every);
    pg.next = (i0 / pg.every + 1) * pg.every; /* the lines an uninterrupted epoch prints */
    pg.t0 = tep;                              /* its rate, ETA and time taken: of the whole epoch */
    if (vt_dist_launched()) pg.tty = 0; /* OpenMPI gives ranks a terminal even when its output goes to a file */
    for (int i = i0; i < spe; i++) {
        double lr = vt_sched_lr(&r->sched, r->st.step), loss = 0.0;
        int64_t right = 0;
        if ((rc = train_step(r, i, lr, &loss, &right, &stop, e))) {
            vt_progress_end(&pg); /* a terminal's progress line ends before the error is printed */
            return rc;
        }
        correct += right;
        lsum += loss;
        if (vt_progress_due(&pg, i + 1)) {
            double tn = now_s(), dt = (tn - tbatch) / (i + 1 - last_i);
            char line[256];
            snprintf(line, sizeof line, "Train: %lld [%4d/%d (%3.0f%%)]  Loss: %#.4g (%#.4g)  Time: %.3fs, %7.1f/s  "
                     "LR: %.3e", (long long)r->st.epoch, i + 1, spe, 100.0 * (i + 1) / spe, loss, lsum / (i + 1), dt,
                     (double)r->B * dp->size / dt, lr);
            vt_progress_show(&pg, i + 1, line);
            tbatch = tn;
            last_i = i + 1;
        }
        if (stop && (i + 1) % A == 0 && i + 1 < spe) { /* at the epoch's last step the epoch ends first */
            vt_progress_end(&pg);
            return stop_mid_epoch(r, i + 1, &(epoch_tally){lsum, correct, now_s() - tep, pg.tty, 1}, skipped0, e);
        }
    }
    vt_progress_end(&pg);
    double skipped = (double)vt_loader_skipped(r->L);
    if ((rc = vt_dist_sum(dp, &skipped, 1, e))) return rc;
    skipped += (double)skipped0;
    if (skipped > 0)
        say(r, "Skipped %.0f unreadable training image%s this epoch (each replaced by the next readable one)\n",
            skipped, skipped == 1 ? "" : "s");
    const double ep_s = now_s() - tep;
    r->train_s += ep_s - before;
    char when[64];
    snprintf(when, sizeof when, "after epoch %lld's training", (long long)r->st.epoch);
    rc = check_state(r, when, "that epoch", e);
    if ((rc = vt_dist_agree(dp, rc, e))) return rc;
    *et = (epoch_tally){lsum, correct, ep_s, pg.tty, stop};
    return 0;
}

/* Rank 0's files of an epoch (validated as ev, trained as et): the best weights when it beats the best so far, its
 * metrics row, the weights, the EMA weights and the checkpoint, in that order; then the curves. */
static int save_epoch(train_run *r, const vt_eval_result *ev, const epoch_tally *et, vt_err *e) {
    const vt_train_opts *o = r->o;
    train_state *st = &r->st;
    int rc = 0;
    if (r->out) fflush(r->out);
    vt_metrics_row row = {(double)st->epoch + 1, st->step, et->lsum / r->spe,
                          (double)et->correct / (double)r->epoch_imgs, ev->loss, ev->acc1,
                          vt_sched_lr(&r->sched, st->step - 1), r->epoch_imgs / et->ep_s, now_s() - r->t0, ev->acc5};
    train_state next = *st;
    next.epoch++;
    /* the best validation top-1 so far: its weights are written before the checkpoint that names them */
    const int better = ev->n > 0 && (st->best_epoch < 0 || ev->acc1 > st->best_acc1);
    if (better) {
        next.best_epoch = st->epoch;
        next.best_acc1 = ev->acc1;
    }
    char epath[4096]; /* weights_ema.safetensors beside weights.safetensors */
    snprintf(epath, sizeof epath, "%s/weights_ema.safetensors", o->run_dir);
    /* the weights before the checkpoint that counts their epoch: a run killed between the two resumes at
     * the epoch before and writes the same weights again, while the other order could leave a finished
     * checkpoint beside the previous epoch's weights, which its resume ("nothing to train") keeps */
    r->P->epoch = st->epoch + 1; /* weights_best's epoch, which a resume checks against the checkpoint's best */
    const int best_bad = better && vt_params_save(r->P, r->bpath, e);
    r->P->epoch = 0;
    if (vt_metrics_append(o->run_dir, &row, e) || best_bad || vt_params_save(r->P, r->wpath, e) || (r->ema.P && vt_params_save(r->ema.P, epath, e)) ||
        save_checkpoint(r->ckpt, r->c, o, r->P, &r->opt, r->ema.P, &next, r->dp->size, e))
        rc = -1;
    st->best_epoch = next.best_epoch;
    st->best_acc1 = next.best_acc1;
    if (rc == 0 && !r->ema.P && unlink(epath) == 0 && r->out) /* a resume that turned the EMA off: not left stale */
        fprintf(r->out, "Note: removed weights_ema.safetensors, an earlier epoch's EMA weights (this run keeps no "
                        "EMA)\n");
    vt_err pe = {0};
    if (rc == 0 && (r->curves_failed = vt_plot_curves(o->run_dir, &pe) != 0) && o->warn)
        vt_write_line(o->warn, "vitc: warning: ", pe.msg, 1);
    return rc;
}

/* The end of epoch r->st.epoch (trained as et): validation of the weights and of their EMA, the Test lines, rank 0's
 * files of the epoch; every rank stops when one of them fails. */
static int end_epoch(train_run *r, const epoch_tally *et, vt_err *e) {
    const vt_model_cfg *c = r->c;
    vt_dist *dp = r->dp;
    const int64_t epoch = r->st.epoch;
    int rc = 0;
    /* the validation of the weights and of their EMA: a failure (logits that are not finite) stops the run
     * before anything of this epoch is written, with the cause, in a message of its own (vt_err keeps the first) */
    vt_eval_result ev = {0};
    vt_err ve = {0};
    const int poison = r->o->fault_nan_eval == epoch && dp->rank == dp->size - 1; /* the last rank only */
    if (evaluate_ranks(c, r->P, &r->vs, &r->d.eval_tf, r->LV, dp, &ev, et->tty ? r->out : NULL, poison && !r->ema.P,
                       &ve))
        return vt_seterr(e, "validation of epoch %lld failed: %.300s; stopped before writing that epoch. The last "
                         "good checkpoint is %s", (long long)epoch, ve.msg, r->good);
    say(r, "Test: epoch %lld  Loss: %.4f  Acc@1: %.2f%%  Acc@5: %.2f%%  (train loss %.4f, acc %.2f%%, %.1f img/s)\n",
        (long long)epoch, ev.loss, 100 * ev.acc1, 100 * ev.acc5, et->lsum / r->spe,
        100.0 * et->correct / (double)r->epoch_imgs, r->epoch_imgs / et->ep_s);
    if (ev.skipped > 0)
        say(r, "Skipped %lld unreadable validation image%s\n", (long long)ev.skipped, ev.skipped == 1 ? "" : "s");
    if (ema_eval(c, &r->ema, &r->vs, &r->d.eval_tf, r->LV, dp, epoch, poison, r->out, &ve))
        return vt_seterr(e, "validation of the model EMA at epoch %lld failed: %.300s; stopped before writing that "
                         "epoch. The last good checkpoint is %s", (long long)epoch, ve.msg, r->good);
    vt_err we = {0};
    if (r->lead && save_epoch(r, &ev, et, &we)) /* a full disk: the checkpoint a resume can take is the last one */
        rc = vt_seterr_from(e, &we, "%.700s; stopped before epoch %lld's checkpoint. The last good checkpoint is %s",
                            we.msg, (long long)epoch, r->good);
    if ((rc = vt_dist_agree(dp, rc, e))) return rc; /* rank 0's writes failed: every rank stops */
    r->good = r->ckpt;
    return 0;
}

/* After epoch r->st.epoch's files: 1 when a stop was asked at its last step (et) or a rank's o->stop flag is up (a
 * stop asked during the validation or the writes), said; 0 when not, -1 when the ranks could not agree. */
static int stop_asked(train_run *r, const epoch_tally *et, vt_err *e) {
    double up = et->stop || (r->o->stop && r->o->stop->asked) ? 1.0 : 0.0;
    if (vt_dist_sum(r->dp, &up, 1, e)) return -1;
    if (up > 0)
        say(r, "Stopped as asked after epoch %lld (step %lld): %s holds the run there; train with --resume %s to go on "
            "from the next epoch\n", (long long)r->st.epoch, (long long)r->st.step, r->ckpt, r->o->run_dir);
    return up > 0;
}

/* Rank 0's closing lines of a run trained to its end: where its weights are, its best epoch, and under mpirun the
 * time its gradient averaging took. */
static void run_summary(const train_run *r) {
    const vt_dist *dp = r->dp;
    const train_state *st = &r->st;
    if (!r->lead) return;
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    say(r, "Done: %d epoch%s; weights in %s, %s %s/curves.%s; peak memory %.1f MiB\n", run_epochs(r->o),
        run_epochs(r->o) == 1 ? "" : "s", r->wpath,
        r->curves_failed ? "curves not drawn (see the warning), their script" : "curves", r->o->run_dir,
        r->curves_failed ? "gp" : "png", ru.ru_maxrss / 1024.0);
    if (st->best_epoch >= 0) /* a resume from a folder that lost the file has none until an epoch beats it */
        say(r, "Best: epoch %lld, Acc@1 %.2f%%; %s%s\n", (long long)st->best_epoch, 100 * st->best_acc1,
            access(r->bpath, F_OK) == 0 ? "its weights in " : "its weights are missing (the resumed run folder had "
            "no weights_best.safetensors of that epoch)", access(r->bpath, F_OK) == 0 ? r->bpath : "");
    if (dp->size > 1 && r->steps_run > 0) {
        char acc[48] = "";
        if (r->A > 1) snprintf(acc, sizeof acc, " x %d accumulation steps", r->A);
        say(r, "Data parallel: %d ranks x batch %d%s; gradient averaging %.2f ms/step (%s allreduce, buckets of %.3g "
            "MiB) of %.1f ms/step (%.1f%%)\n", dp->size, r->B, acc, 1e3 * dp->comm_s / (double)r->steps_run,
            dp->overlap ? "overlapped" : "blocking", (double)dp->bucket_bytes / (1 << 20),
            1e3 * r->train_s / (double)r->steps_run, 100.0 * dp->comm_s / r->train_s);
    }
}

/* Frees everything run r holds, whatever phase it reached, and releases the run folder. */
static void run_close(train_run *r) {
    vt_loader_free(r->L);
    vt_loader_free(r->LV);
    free(r->idx);
    free(r->keys);
    free(r->lab);
    vt_dist_grads_free(r->gb);
    vt_graph_free(r->t.g);
    vt_adamw_free(&r->opt);
    vt_ema_free(&r->ema);
    vt_params_free(r->P);
    vt_data_close(&r->d);
    if (r->lock >= 0) close(r->lock); /* releases the run folder */
}

int vt_train(const vt_model_cfg *cfg, const vt_train_opts *given, vt_err *e) {
    train_run r = {0}; /* all of it freed by run_close, opened or not */
    r.tc = vt_model_training_form(cfg);
    r.c = &r.tc;
    r.own = *given;
    r.o = &r.own;
    r.one = (vt_dist){.size = 1, .local_size = 1};
    r.dp = r.o->dist ? r.o->dist : &r.one;
    /* the ranks check alike (one command); agreed, so that one reports it and none aborts the others */
    if (vt_dist_agree(r.dp, check_opts(r.c, r.o, e), e)) return -1;
    r.lead = r.dp->rank == 0;
    r.out = r.lead ? r.o->log : NULL;
    r.lock = -1;
    /* each phase up to run_sync is entered failed or not: every rank meets the others in their collective checks */
    int rc = run_open(&r, e);
    rc = run_folder(&r, rc, e);
    rc = run_record(&r, rc, e);
    rc = run_sync(&r, rc, e);
    if (rc == 0 && !(r.o->resume && r.st.epoch >= run_epochs(r.o))) { /* every rank: a finished run trains nothing */
        run_begin(&r);
        if (r.o->stop) r.o->stop->training = 1; /* a signal now asks the run to stop, with a checkpoint */
        for (; r.st.epoch < run_epochs(r.o); r.st.epoch++) {
            epoch_tally et;
            if ((rc = train_epoch(&r, &et, e)) || (rc = end_epoch(&r, &et, e))) break;
            if (r.st.epoch + 1 < run_epochs(r.o) && (rc = stop_asked(&r, &et, e))) /* its checkpoint just written */
                break;
        }
        if (r.o->stop) r.o->stop->training = 0;
        if (rc == 0) run_summary(&r);
    }
    run_close(&r);
    return rc;
}
