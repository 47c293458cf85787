/* The registry sweep (timm's test_models backward sweep): every registered model, shrunk to one block per stage
 * (two for the Refiner's plain/shared pairs, five in Next-ViT's stage 3) at the smallest image size it accepts, builds
 * its train and eval graphs, takes a training step (forward, backward, AdamW) and an eval forward with finite
 * outputs, and gives every parameter a non-zero gradient except those zero by construction, listed below with the
 * reason. It also checks the memory plan: the same step planned keep_all (every activation kept until its producer's
 * backward) gives bit-identical gradients, also with the values no backward declares reading poisoned (NaN) and the
 * gradients a backward writes first (vt_node.grad_fresh) NaN until it runs, from an arena no smaller than the default
 * plan's. And class-token ViTs' pruned last block (only the class token's row) against the graph of every token. */
#include <fnmatch.h>
#include <math.h>
#include <stdlib.h>
#include <time.h>
#include <string.h>

#include "shrink.h"
#include "test.h"
#include "vitc/model.h"
#include "vitc/optim.h"
#include "vitc/predict.h"
#include "vitc/train.h"

/* Parameters whose gradient is exactly zero in a train graph by construction (model and parameter patterns). */
static const struct {
    const char *model, *param, *why;
} zero_ok[] = {
    {"groupmixformer_*", "conv_stem.proj[12].bias", "a conv bias followed by a train-mode BatchNorm"},
    {"groupmixformer_*", "groupmixformer_backbone.3.gma_stage.*.mlp.fc2.bias",
     "the last block's fc2 bias reaches norm4, a train-mode BatchNorm, only as a per-channel shift"},
    {"*hmhsa*", "blocks.*.attn.chh.bias", "a per-head constant on every logit of a row, cancelled by the softmax"},
    {"*hmhsa_cffn", "blocks.*.mlp.fc2_u.rep.*.bn.bias", "U's BatchNorm shift is cancelled by V's train-mode BatchNorm"},
    {"flatten_deit_tiny", "blocks.0.attn.dwc.*", "the last block's DWC never reaches the class token's head"},
    {"refiner_vit_*_dense", "aux_head.*", "the token-labelling head is not in train graphs (class head only)"},
    {"refiner_vit_*", "blocks.1.attn.DLA.bn3.bias", "adapt_bn (train-mode BatchNorm) removes per-channel shifts"},
    {"*swin_*", "layers.3.blocks.*.attn.relative_position_bias_table",
     "at the sweep's 32 px the last Microsoft-layout stage is a 1x1 map: a one-token window's bias is its row's only "
     "logit, cancelled by the softmax"},
    {"flatten_pvt_*", "norm.*", "FLatten-PVT keeps PVT's final norm in its state_dict but never applies it (GAP)"},
    {"pvt_*", "block[123].*.attn.q.*", "at the sweep's 32 px every SR key grid is 1x1: softmax over one key is 1"},
    {"pvt_v2_*", "block4.*.attn.q.*", "at 32 px stage 4 is a 1x1 grid (no class token): one key, softmax 1"},
    {"pvt_v2_*hmhsa*", "block*.attn.[ic]hh.*", "every key is on the IHH grid, so the biases are per-head constants of a "
     "softmax row; at 32 px every key grid is 1x1 (one key), so the weights get none either"},
    {"pvt_v2_*hmhsa_cffn", "block*.mlp.fc2_u.rep.*.bn.bias", "U's BatchNorm shift is cancelled by V's train-mode BatchNorm"},
    {"nextvit_*", "features.*.e_mhsa.[qk].*", "at the sweep's 28 px every E-MHSA has one key (stages 2-3 hold fewer "
     "than 2·sr² tokens, stage 4 is a 1x1 map): softmax over one key is 1"},
    {"nextvit_*", "features.*.norm1.bias", "with one key its shift reaches only v, through the AvgPool1d whose "
     "train-mode BatchNorm1d removes it"},
    {"nextvit_*hmhsa*", "features.*.e_mhsa.[ic]hh.*", "one key per row: the hallucinated logits are cancelled by the "
     "softmax"},
    {"nextvit_*hmhsa_cffn", "features.*.mlp.conv2_u.rep.*.bn.bias", "U's BatchNorm shift is cancelled by V's train-mode "
     "BatchNorm"},
};

static int zero_allowed(const char *model, const char *param) {
    for (size_t i = 0; i < sizeof zero_ok / sizeof zero_ok[0]; i++)
        if (!fnmatch(zero_ok[i].model, model, 0) && !fnmatch(zero_ok[i].param, param, 0)) return 1;
    return 0;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* A parameter with a gradient buffer (the ones a step changes). */
static int graded(const vt_tensor *t) { return t->kind == VT_PARAM && t->grad; }

/* The plan checks run in the plain build only: they compare two plans of one arena (which ASan sees as one
 * allocation) and are deterministic, and under ASan + UBSan they took 44 of the sweep's 105 s (the sweep is
 * most of the sanitized unit suite's time). The sanitized sweep still builds, steps and evaluates every model. */
#if defined(__SANITIZE_ADDRESS__)
#define SWEEP_PLAN_CHECK 0
#else
#define SWEEP_PLAN_CHECK 1
#endif

/* The keep_all plan of c's train graph over P: its arena is at least the default plan's (arena bytes), and its
 * gradients, plain and poisoned, equal ref (every VT_PARAM's gradient from the default plan, in P's order). */
static void check_plan(vt_test *T, const vt_model_cfg *c, vt_params *P, const float *x0, float *const *ref,
                       int64_t arena) {
    vt_err e = {0};
    const int B = 2;
    vt_tensor *x, *lab;
    vt_graph *g = vt_graph_new(P, 1, &e);
    g->keep_all = 1;
    vt_tensor *y = vt_model_build(g, c, B, &x);
    lab = vt_input(g, "labels", 1, &B);
    vt_graph_set_loss(g, vt_cross_entropy(g, y, lab, 0.0f));
    vt_graph_output(g, y);
    int ok = vt_graph_finalize(g, &e) == 0;
    T_CHECK(T, ok, "%s: keep-all train graph builds: %s", c->name, e.msg);
    if (ok) {
        T_CHECK(T, vt_graph_arena_bytes(g) >= arena, "%s: default plan %lld bytes > keep-all plan %lld", c->name,
                (long long)arena, (long long)vt_graph_arena_bytes(g));
        memcpy(x->data, x0, sizeof(float) * (size_t)x->numel);
        for (int b = 0; b < B; b++) lab->data[b] = (float)(b % c->arch.num_classes);
        for (int pass = 0; ok && pass < 2; pass++) {
            vt_graph_forward(g); /* a backward may overwrite values that only it read: one forward per backward */
            vt_params_zero_grad(P);
            if (pass == 0)
                vt_graph_backward(g);
            else
                ok = vt_graph_backward_poisoned(g, &e) == 0;
            int same = ok;
            for (int i = 0, k = 0; same && i < P->n; i++)
                if (graded(P->t[i]))
                    same = !memcmp(ref[k++], P->t[i]->grad, sizeof(float) * (size_t)P->t[i]->numel);
            T_CHECK(T, same, "%s: gradients of the keep-all plan%s equal the default plan's%s%s", c->name,
                    pass ? ", poisoned," : "",
                    pass ? " (a bwd_reads declaration is too small, or a backward leaves part of a gradient it "
                           "writes first unwritten: vt_node.grad_fresh) "
                         : "",
                    e.msg);
        }
    }
    vt_graph_free(g);
}

/* The eval logits y of input x (a graph of the default kernels: fused ops, oneDNN primitives, the GEMM dispatcher's
 * choices) against an eval graph of c over P whose nodes run their ops' own forwards (ref_kernels; builders then
 * keep the op chains they fuse): within 1e-4 of the logits' scale, NaN failing. The op-level comparisons cover
 * each kernel on the gradient-check shapes; this covers them where a whole model puts them. */
static void check_ref_kernels(vt_test *T, const vt_model_cfg *c, vt_params *P, const vt_tensor *x,
                              const vt_tensor *y) {
    vt_err e = {0};
    vt_tensor *xr = NULL, *yr = NULL;
    vt_graph *g = vt_graph_new(P, 0, &e);
    if (g) {
        g->ref_kernels = 1;
        yr = vt_model_build(g, c, x->shape[0], &xr);
        vt_graph_output(g, yr);
    }
    const int ok = g && vt_graph_finalize(g, &e) == 0 && yr && yr->numel == y->numel;
    T_CHECK(T, ok, "%s: reference-kernel eval graph builds: %s", c->name, e.msg);
    double d = 0.0, m = 0.0;
    if (ok) {
        memcpy(xr->data, x->data, sizeof(float) * (size_t)x->numel);
        vt_graph_forward(g);
        for (int64_t i = 0; i < y->numel; i++) {
            d = t_worse(d, fabs((double)y->data[i] - yr->data[i]));
            m = fmax(m, fabs((double)yr->data[i]));
        }
        T_CHECK(T, d <= 1e-4 * fmax(m, 1e-3), "%s: eval logits of the default kernels %.3g off the reference "
                "kernels' (scale %.3g)", c->name, d, m);
    }
    vt_graph_free(g);
}

/* 1 if two shrunk configs build the same network (same family and architecture; names and drop-path aside). */
static int same_arch(const vt_model_cfg *x, const vt_model_cfg *y) {
    const vt_arch_cfg *a = &x->arch, *b = &y->arch;
    int same = x->family == y->family && a->img_size == b->img_size && a->in_chans == b->in_chans &&
               a->num_classes == b->num_classes && a->patch == b->patch && a->nstages == b->nstages &&
               strcmp(a->ffn, b->ffn) == 0 && a->qkv_bias == b->qkv_bias && a->ln_eps == b->ln_eps &&
               a->class_token == b->class_token && a->aux_head == b->aux_head && a->version == b->version &&
               !memcmp(&a->opts, &b->opts, sizeof a->opts); /* ints and floats only: no padding */
    for (int i = 0; same && i < a->nstages; i++) {
        const vt_stage_cfg *s = &a->stages[i], *t = &b->stages[i];
        same = s->dim == t->dim && s->depth == t->depth && s->heads == t->heads && s->mlp_ratio == t->mlp_ratio &&
               s->window == t->window && s->sr_ratio == t->sr_ratio && strcmp(s->attn, t->attn) == 0;
    }
    return same;
}

/* Sweeps one model, unless its shrunk network equals that of an earlier model (e.g. Next-ViT-S/B/L, which differ
 * only in stage 3's depth): *done holds the shrunk configs swept so far (n of them). nonsquare: the shrunk network on
 * the smallest wider input its family's rule takes (models whose weights fit any size, CSwin taking none; and those
 * made at one H x W, Microsoft Swin's, built at that size). */
static void sweep_one(vt_test *T, const vt_model_cfg *base, vt_model_cfg *done, int *n, int nonsquare) {
    const double t0 = now_s();
    vt_err e = {0};
    vt_model_cfg c0;
    if (vt_test_shrink(base, &c0, &e)) {
        T_CHECK(T, 0, "%s: no small configuration builds: %s", base->name, e.msg);
        return;
    }
    for (int i = 0; i < *n; i++)
        if (same_arch(&c0, &done[i])) return; /* shrunk to a network already swept */
    done[(*n)++] = c0;
    if (nonsquare) {
        const int tuple = (c0.family->caps & VT_CAP_TUPLE_SIZE) != 0;
        if (!vt_model_any_size(&c0) && !tuple) return;
        int found = 0;
        for (int w = c0.arch.img_size + 1; w <= 2 * c0.arch.img_size + 64 && !found; w++) {
            vt_err we = {0};
            vt_model_overrides ov = vt_model_no_overrides();
            ov.img_size = c0.arch.img_size;
            ov.img_w = w;
            vt_model_cfg at;
            found = tuple ? vt_model_configure(&c0, &ov, &at, &we) == 0
                          : vt_model_at_size(&c0, c0.arch.img_size, w, &at, &we) == 0;
            if (found) c0 = at;
        }
        T_CHECK(T, found || strcmp(c0.family->name, "cswin") == 0, "%s: no wider input size taken", c0.name);
        if (!found) return;
    }
    const vt_model_cfg c = vt_model_training_form(&c0);
    vt_params *P = vt_params_new(&e);
    vt_graph *g = NULL, *ge = NULL;
    vt_adamw opt = {0};
    int ok = P && vt_model_init_params(&c, P, 3, &e) == 0;
    const vt_tensor *first4 = NULL; /* --init-from adapts it as the input convolution (src/io/adapt.c) */
    for (int i = 0; ok && i < P->n && !first4; i++)
        if (P->t[i]->ndim == 4) first4 = P->t[i];
    T_CHECK(T, !ok || !first4 || first4->shape[1] == c.arch.in_chans, "%s: the first 4-D tensor %s reads %d channels, "
            "not the image's %d", c.name, first4->name, first4->shape[1], c.arch.in_chans);
    const int B = 2;
    vt_tensor *x = NULL, *xe = NULL, *y = NULL, *ye = NULL, *lab = NULL;
    if (ok) {
        g = vt_graph_new(P, 1, &e);
        y = vt_model_build(g, &c, B, &x);
        lab = vt_input(g, "labels", 1, &B);
        vt_graph_set_loss(g, vt_model_loss(g, vt_cross_entropy(g, y, lab, 0.0f))); /* (with Refiner's cos_reg) */
        vt_graph_output(g, y);
        ok = vt_graph_finalize(g, &e) == 0 && vt_adamw_init(&opt, P, 0.9f, 0.999f, 1e-8f, 0.05f, &e) == 0;
    }
    if (ok) {
        ge = vt_graph_new(P, 0, &e);
        ye = vt_model_build(ge, &c, B, &xe);
        vt_graph_output(ge, ye);
        ok = vt_graph_finalize(ge, &e) == 0;
    }
    char size[24];
    vt_arch_size_text(&c.arch, size, sizeof size);
    T_CHECK(T, ok, "%s (img %s): train and eval graphs build: %s", c.name, size, e.msg);
    if (ok) {
        vt_rng r;
        vt_rng_seed(&r, 11);
        for (int64_t i = 0; i < x->numel; i++) x->data[i] = xe->data[i] = vt_rng_normal(&r);
        for (int b = 0; b < B; b++) lab->data[b] = (float)(b % c.arch.num_classes);
        vt_graph_forward(g);
        vt_params_zero_grad(P);
        vt_graph_backward(g);
        int zero = 0, nonfinite = !isfinite(g->loss->data[0]);
        for (int i = 0; i < P->n; i++) {
            const vt_tensor *t = P->t[i];
            if (t->kind != VT_PARAM) continue;
            int nz = 0;
            for (int64_t j = 0; j < t->numel; j++) {
                nz |= t->grad[j] != 0.0f;
                nonfinite |= !isfinite(t->grad[j]);
            }
            if (!nz && !zero_allowed(c.name, t->name)) {
                T_CHECK(T, 0, "%s: parameter %s gets no gradient", c.name, t->name);
                zero++;
            }
        }
        float **ref = P->n > 0 ? calloc((size_t)P->n, sizeof *ref) : NULL;
        float *x0 = malloc(sizeof(float) * (size_t)x->numel);
        int np = 0, have = ref && x0;
        for (int i = 0; have && i < P->n; i++)
            if (graded(P->t[i]) &&
                (have = (ref[np] = malloc(sizeof(float) * (size_t)P->t[i]->numel)) != NULL))
                memcpy(ref[np++], P->t[i]->grad, sizeof(float) * (size_t)P->t[i]->numel);
        if (have && SWEEP_PLAN_CHECK) {
            memcpy(x0, x->data, sizeof(float) * (size_t)x->numel);
            check_plan(T, &c, P, x0, ref, vt_graph_arena_bytes(g));
            for (int i = 0, k = 0; i < P->n; i++) /* the default plan's gradients back for the step */
                if (graded(P->t[i])) memcpy(P->t[i]->grad, ref[k++], sizeof(float) * (size_t)P->t[i]->numel);
        }
        T_CHECK(T, have, "%s: out of memory for the plan check", c.name);
        for (int i = 0; ref && i < np; i++) free(ref[i]);
        free(ref);
        free(x0);
        vt_adamw_step(&opt, 1e-3f);
        vt_graph_forward(ge);
        for (int64_t i = 0; i < ye->numel; i++) nonfinite |= !isfinite(ye->data[i]);
        T_CHECK(T, !nonfinite, "%s: loss, gradients and eval logits after a step are finite", c.name);
        check_ref_kernels(T, &c, P, xe, ye);
        T_CHECK(T, zero == 0, "%s: %d parameters without gradient", c.name, zero);
    }
    if (getenv("VITC_SWEEP_TIMES")) fprintf(stderr, "%-28s img %7s %6.2f s\n", c.name, size, now_s() - t0);
    vt_adamw_free(&opt);
    vt_graph_free(g);
    vt_graph_free(ge);
    vt_params_free(P);
}

/* A train graph of c over P for a batch of B (all_tokens as given), its input filled from x0 and labels b % classes,
 * one forward and backward run; NULL (and a failed check) if it does not build. */
static vt_graph *step_graph(vt_test *T, const vt_model_cfg *c, vt_params *P, int B, int all_tokens, const float *x0) {
    vt_err e = {0};
    vt_tensor *x, *lab;
    vt_graph *g = vt_graph_new(P, 1, &e);
    if (!g) return NULL;
    g->all_tokens = all_tokens;
    vt_tensor *y = vt_model_build(g, c, B, &x);
    lab = vt_input(g, "labels", 1, &B);
    vt_graph_set_loss(g, vt_cross_entropy(g, y, lab, 0.0f));
    vt_graph_output(g, y);
    const int ok = vt_graph_finalize(g, &e) == 0;
    T_CHECK(T, ok, "%s (all_tokens %d): train graph builds: %s", c->name, all_tokens, e.msg);
    if (!ok) {
        vt_graph_free(g);
        return NULL;
    }
    memcpy(x->data, x0, sizeof(float) * (size_t)x->numel);
    for (int b = 0; b < B; b++) lab->data[b] = (float)(b % c->arch.num_classes);
    vt_graph_forward(g);
    vt_params_zero_grad(P);
    vt_graph_backward(g);
    return g;
}

/* A class-token ViT's last block computes only the class token's row past its keys and values unless the graph
 * asks for every token (g->all_tokens): the same loss and gradients to rounding, with fewer MACs. attn: the
 * attention type (NULL: the model's). */
static void check_all_tokens(vt_test *T, const char *name, const char *attn) {
    vt_err e = {0};
    vt_model_cfg c;
    vt_model_overrides ov = vt_model_no_overrides();
    ov.drop_path = 0.0f;
    ov.attn = attn;
    const vt_model_cfg *base = vt_model_find(name);
    vt_params *P = vt_params_new(&e);
    int ok = base && P && vt_model_configure(base, &ov, &c, &e) == 0 && vt_model_init_params(&c, P, 5, &e) == 0;
    T_CHECK(T, ok, "%s: configured: %s", name, e.msg);
    const int B = 3, S = ok ? c.arch.img_size : 0, n = B * c.arch.in_chans * S * S;
    float *x0 = ok ? malloc(sizeof(float) * (size_t)n) : NULL, **ref = ok ? calloc((size_t)P->n, sizeof *ref) : NULL;
    vt_rng r;
    vt_rng_seed(&r, 17);
    for (int i = 0; x0 && i < n; i++) x0[i] = vt_rng_normal(&r);
    vt_graph *full = x0 && ref ? step_graph(T, &c, P, B, 1, x0) : NULL;
    for (int i = 0; full && i < P->n; i++)
        if (graded(P->t[i]) && (ref[i] = malloc(sizeof(float) * (size_t)P->t[i]->numel)))
            memcpy(ref[i], P->t[i]->grad, sizeof(float) * (size_t)P->t[i]->numel);
    vt_graph *cls = full ? step_graph(T, &c, P, B, 0, x0) : NULL;
    if (cls) {
        T_CHECK(T, vt_graph_macs(cls) < vt_graph_macs(full), "%s: the class-token last block does less (%lld vs %lld "
                "MACs)", name, (long long)vt_graph_macs(cls), (long long)vt_graph_macs(full));
        const float l0 = full->loss->data[0], l1 = cls->loss->data[0];
        T_CHECK(T, fabsf(l0 - l1) <= 1e-5f * fabsf(l0), "%s: loss %.8g with every token, %.8g with the class token's "
                "row", name, l0, l1);
        /* RMS differences relative to each tensor's RMS gradient, floored at 1% of the largest: a gradient that is
         * zero in exact arithmetic (hMHSA's CHH bias: softmax ignores a shift of a whole row) is rounding alone */
        double worst = 0.0, top = 0.0, *rms = calloc((size_t)P->n, sizeof *rms), *dif = calloc((size_t)P->n, sizeof *dif);
        const char *where = "";
        for (int i = 0; rms && dif && i < P->n; i++) {
            if (!ref[i]) continue;
            for (int64_t j = 0; j < P->t[i]->numel; j++) {
                const double d = (double)P->t[i]->grad[j] - (double)ref[i][j];
                dif[i] += d * d;
                rms[i] += (double)ref[i][j] * ref[i][j];
            }
            rms[i] = sqrt(rms[i] / (double)P->t[i]->numel);
            dif[i] = sqrt(dif[i] / (double)P->t[i]->numel);
            top = rms[i] > top ? rms[i] : top;
        }
        for (int i = 0; rms && dif && i < P->n; i++) {
            const double rel = ref[i] ? dif[i] / fmax(rms[i], 1e-2 * top) : 0.0;
            if (!(rel <= worst)) { /* a NaN difference too */
                worst = rel == rel ? rel : INFINITY;
                where = P->t[i]->name;
            }
        }
        T_CHECK(T, rms && dif && top > 0.0, "%s: gradients compared", name);
        free(rms);
        free(dif);
        T_CHECK(T, worst <= 1e-5, "%s: gradients equal every token's graph's (worst relative %.3g in %s)", name, worst,
                where);
    }
    for (int i = 0; ref && i < P->n; i++) free(ref[i]);
    free(ref);
    free(x0);
    vt_graph_free(full);
    vt_graph_free(cls);
    vt_params_free(P);
}

/* Configuring `name` with ov: 0, or -1 with e's code the kind asked (VT_E_USAGE: an option the model cannot apply or
 * a value out of range, the CLI's exit status 2, as for its scalar options). */
static void check_configure(vt_test *T, const char *name, const vt_model_overrides *ov, int want_rc, int want_code,
                            const char *what) {
    vt_err e = {0};
    vt_model_cfg c;
    const vt_model_cfg *base = vt_model_find(name);
    const int rc = base ? vt_model_configure(base, ov, &c, &e) : 1;
    T_CHECK(T, rc == want_rc && (rc == 0 || e.code == want_code), "%s %s: rc %d code %d (want %d, %d): %s", name, what,
            rc, e.code, want_rc, want_code, e.msg);
}

/* vt_model_configure's errors are all the options' (VT_E_USAGE), values out of range and family rules included; the
 * first error keeps its code. */
static void check_option_kinds(vt_test *T) {
    vt_model_overrides ov = vt_model_no_overrides();
    ov.train_form = 1;
    check_configure(T, "deit_tiny_patch16_224", &ov, -1, VT_E_USAGE, "--train-form (nothing re-parameterised)");
    check_configure(T, "nextvit_small", &ov, 0, 0, "--train-form (BatchNorm merge)");
    ov.ffn = "cffn";
    check_configure(T, "deit_tiny_patch16_224", &ov, 0, 0, "--ffn cffn --train-form");
    ov = vt_model_no_overrides();
    ov.windows[0] = 7;
    check_configure(T, "deit_tiny_patch16_224", &ov, -1, VT_E_USAGE, "--windows 7");
    ov = vt_model_no_overrides();
    ov.drop_path = 0.1f;
    check_configure(T, "groupmixformer_tiny", &ov, 0, 0, "--drop-path 0.1");
    ov.drop_path = 1.0f; /* a library caller's: the command line stops it at 0.99 */
    check_configure(T, "groupmixformer_tiny", &ov, -1, VT_E_USAGE, "drop_path 1 (kept branches scaled by 1/0)");
    ov.drop_path = NAN;
    check_configure(T, "groupmixformer_tiny", &ov, -1, VT_E_USAGE, "drop_path NaN");
    ov = vt_model_no_overrides();
    ov.img_size = 5000;
    check_configure(T, "deit_tiny_patch16_224", &ov, -1, VT_E_USAGE, "--img-size 5000 (a value out of range)");
    ov.img_size = 15;
    check_configure(T, "deit_tiny_patch16_224", &ov, -1, VT_E_USAGE, "--img-size 15 (below the patch)");
    ov.img_size = 40; /* timm's rule: the patch conv drops the last 8 pixels */
    check_configure(T, "deit_tiny_patch16_224", &ov, 0, 0, "--img-size 40 (not a multiple of the patch)");
    ov.img_size = 223;
    check_configure(T, "groupmixformer_tiny", &ov, 0, 0, "--img-size 223 (stage-1 grid 56)");
    ov.img_size = 220;
    check_configure(T, "groupmixformer_tiny", &ov, -1, VT_E_USAGE, "--img-size 220 (stage-1 grid 55)");
    ov.img_size = 238;
    check_configure(T, "refiner_vit_s", &ov, 0, 0, "--img-size 238 (14 px cut, 14x14 tokens)");
    ov.img_size = 239;
    check_configure(T, "refiner_vit_s", &ov, -1, VT_E_USAGE, "--img-size 239 (16k + 15)");
    /* vt_model_configure's usage code goes with its own message: not onto an error e held before the call (whose
     * message stays), and no error record at all (e NULL, as vt_seterr takes) is fine */
    vt_err held = {0};
    vt_model_cfg c;
    vt_seterr(&held, "earlier");
    const int rc = vt_model_configure(vt_model_find("refiner_vit_s"), &ov, &c, &held);
    T_CHECK(T, rc == -1 && strcmp(held.msg, "earlier") == 0 && held.code == VT_E_FAILED, "an error held before "
            "vt_model_configure keeps its code: rc %d, %s %d", rc, held.msg, held.code);
    T_CHECK(T, vt_model_configure(vt_model_find("refiner_vit_s"), &ov, &c, NULL) == -1,
            "vt_model_configure without an error record refuses --img-size 239");
    vt_err e = {0};
    vt_seterr(&e, "first");
    vt_seterr_code(&e, VT_E_USAGE, "second");
    T_CHECK(T, strcmp(e.msg, "first") == 0 && e.code == VT_E_FAILED, "the first error keeps its code: %s %d", e.msg,
            e.code);
    vt_clearerr(&e);
    vt_seterr_code(&e, VT_E_USAGE, "third");
    T_CHECK(T, strcmp(e.msg, "third") == 0 && e.code == VT_E_USAGE, "after vt_clearerr a new code: %s %d", e.msg,
            e.code);
}

/* --img-size values: N or HxW (w 0 when square), anything else refused. */
/* "did you mean": the nearest of the names offered (edits, case ignored; a name the word begins after one edit, the
 * shortest first), none when every name is far, and the registry's hint */
static void check_nearest(vt_test *T) {
    static const char *const names[] = {"train", "predict", "forward", "grad", "deploy", "deit_tiny_patch16_224",
                                        "deit_tiny_hmhsa_cffn", "pvt_tiny"};
    static const struct { const char *word, *want; } cases[] = {
        {"trian", "train"},      {"TRAIN", "train"},  {"predcit", "predict"}, {"foward", "forward"}, {"grd", "grad"},
        {"xyz", NULL},           {"", NULL},          {"de", NULL},           {"deit_tiny", "deit_tiny_hmhsa_cffn"},
        {"pvt_tin", "pvt_tiny"}, {"deploy", "deploy"}, {"deit_tiny_patch16_225", "deit_tiny_patch16_224"},
        {"pvt_tiny_and_more", NULL}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        vt_nearest s = {.word = cases[k].word};
        for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) vt_nearest_try(&s, names[i], strlen(names[i]));
        const int ok = cases[k].want ? s.best && (int)strlen(cases[k].want) == s.best_len &&
                                           strncmp(s.best, cases[k].want, (size_t)s.best_len) == 0
                                     : !s.best;
        T_CHECK(T, ok, "nearest of '%s': '%.*s', want '%s'", cases[k].word, s.best ? s.best_len : 6,
                s.best ? s.best : "(none)", cases[k].want ? cases[k].want : "(none)");
    }
    vt_nearest s = {.word = "grad"}; /* a word in a list: only len bytes are compared and kept */
    vt_nearest_try(&s, "gradient", 4);
    char buf[64];
    T_CHECK(T, strcmp(vt_nearest_hint(&s, buf, sizeof buf), "did you mean 'grad'? ") == 0, "hint '%s'", buf);
    T_CHECK(T, strcmp(vt_model_hint("swin_tiny_patch4_window7_244", buf, sizeof buf),
                      "did you mean 'swin_tiny_patch4_window7_224'? ") == 0 &&
                   strcmp(vt_model_hint("resnet50", buf, sizeof buf), "") == 0,
            "model hint '%s'", buf);
}

static void check_parse_size(vt_test *T) {
    static const struct { const char *s; int rc, h, w; } cases[] = {
        {"64", 0, 64, 0}, {"64x96", 0, 64, 96}, {"64x64", 0, 64, 0}, {"16777216x1", 0, 16777216, 1},
        {"16777217", -1, 0, 0}, {"x", -1, 0, 0}, {"64x", -1, 0, 0}, {"x64", -1, 0, 0}, {"64x96x3", -1, 0, 0},
        {" 64", -1, 0, 0}, {"64 ", -1, 0, 0}, {"0x5", -1, 0, 0}, {"+5", -1, 0, 0}, {"64X96", -1, 0, 0}, {"", -1, 0, 0}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        int h = -7, w = -7;
        const int rc = vt_parse_size(cases[k].s, &h, &w);
        T_CHECK(T, rc == cases[k].rc && (rc || (h == cases[k].h && w == cases[k].w)), "'%s': rc %d, %d x %d",
                cases[k].s, rc, h, w);
    }
}

/* Non-square inputs (vt_arch_cfg.img_w) where the official code takes them: the family rules per side (GroupMixFormer,
 * PVTv2) or over both (Next-ViT's token count), square-only CSwin and size-bound weights refused, the graph's input
 * H x W, and the image paths (eval and training transforms crop squares) refusing such a configuration. */
static void check_nonsquare(vt_test *T) {
    static const struct { const char *name; int h, w, ok; } cases[] = {
        {"groupmixformer_tiny", 224, 192, 1}, {"groupmixformer_tiny", 224, 200, 0},
        {"groupmixformer_tiny", 200, 224, 0}, {"groupmixformer_tiny", 224, 4097, 0},
        {"pvt_v2_b1", 29, 64, 1}, {"pvt_v2_b1", 64, 28, 0}, {"nextvit_small", 16, 64, 1}, {"nextvit_small", 16, 32, 0},
        {"swin_t", 44, 60, 1}, {"swin_t", 44, 3, 0}, {"simplevit_ti_msf", 32, 48, 1}, {"simplevit_ti_msf", 32, 40, 0},
        {"cswin_tiny_224", 224, 192, 0}, {"deit_tiny_patch16_224", 224, 192, 1}, {"pvt_tiny", 224, 192, 0},
        {"flatten_deit_tiny", 224, 192, 0}, {"flatten_deit_tiny", 224, 239, 1}, {"refiner_vit_s", 224, 192, 0},
        {"deit_tiny_hmhsa_cffn", 224, 320, 1}, {"deit_tiny_patch16_224", 224, 8, 0},
        {"swin_tiny_patch4_window7_224", 224, 192, 0}, {"swin_tiny_patch4_window7_224", 224, 448, 1},
        {"swin_tiny_patch4_window7_224", 448, 224, 1}, {"swin_tiny_patch4_window7_224", 224, 336, 0},
        {"flatten_swin_tiny", 224, 448, 1}, {"flatten_swin_tiny", 224, 320, 0}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        vt_model_overrides ov = vt_model_no_overrides();
        ov.img_size = cases[k].h;
        ov.img_w = cases[k].w;
        char what[48];
        snprintf(what, sizeof what, "at %dx%d", cases[k].h, cases[k].w);
        check_configure(T, cases[k].name, &ov, cases[k].ok ? 0 : -1, VT_E_USAGE, what);
    }
    vt_err e = {0};
    vt_model_cfg c;
    const vt_model_cfg *deit = vt_model_find("deit_tiny_patch16_224"), *gmf = vt_model_find("groupmixformer_test");
    /* images are resized to H / crop_pct x W / crop_pct: the width's past the image limit is refused too */
    vt_model_overrides wide = vt_model_no_overrides();
    wide.img_size = 32;
    wide.img_w = 2048;
    wide.crop_pct = 0.1f;
    T_CHECK(T, gmf && vt_model_configure(gmf, &wide, &c, &e) == -1 && strstr(e.msg, "resizes 2048 px images to"),
            "groupmixformer_test at 32x2048, crop_pct 0.1: %s", e.msg);
    vt_clearerr(&e);
    T_CHECK(T, vt_model_at_size(deit, 224, 192, &c, &e) == -1 && strstr(e.msg, "build it with --img-size 224x192"),
            "deit at 224x192: %s", e.msg);
    vt_clearerr(&e);
    const vt_model_cfg *pvt1 = vt_model_find("flatten_pvt_tiny");
    T_CHECK(T, pvt1 && vt_model_at_size(pvt1, 224, 192, &c, &e) == -1 && strstr(e.msg, "square inputs of one size"),
            "flatten_pvt_tiny at 224x192: %s", e.msg);
    vt_clearerr(&e);
    int ok = vt_model_at_size(gmf, 64, 96, &c, &e) == 0 && c.arch.img_size == 64 && vt_arch_width(&c.arch) == 96;
    T_CHECK(T, ok, "groupmixformer_test at 64x96: %s", e.msg);
    vt_params *P = ok ? vt_params_new(&e) : NULL;
    vt_graph *g = P && vt_model_init_params(&c, P, 1, &e) == 0 ? vt_graph_new(P, 0, &e) : NULL;
    vt_tensor *x = NULL, *y = g ? vt_model_build(g, &c, 2, &x) : NULL;
    T_CHECK(T, y && x->shape[2] == 64 && x->shape[3] == 96 && y->shape[0] == 2 && y->shape[1] == 10,
            "groupmixformer_test at 64x96 builds on a (2, 3, 64, 96) input: %s", g ? g->err.msg : e.msg);
    vt_graph_free(g);
    vt_data d;
    vt_prediction pr;
    const char *img = "none.png";
    T_CHECK(T, ok && vt_data_open(&c, "fashion-mnist", 0, 0, NULL, 0, 0, &d, &e) == -1 &&
            strstr(e.msg, "3×64×96 inputs; Fashion-MNIST needs"), "Fashion-MNIST at 64x96 refused: %s", e.msg);
    vt_clearerr(&e);
    /* images are read at 64x96 (test_predict.py checks the pixels): a missing one is that image's own error */
    T_CHECK(T, P && vt_predict_files(&c, P, &img, 1, 1, 1, &pr, NULL, NULL, NULL, NULL, &e) == 1 && !pr.ok &&
            strstr(pr.err.msg, "none.png"), "predict at 64x96 reads the image: %s / %s", e.msg, pr.err.msg);
    vt_params_free(P);
    vt_clearerr(&e);
    T_CHECK(T, vt_model_at_size(&c, 64, 64, &c, &e) == 0 && c.arch.img_w == 0 && vt_arch_width(&c.arch) == 64,
            "back to 64x64: square again (%s)", e.msg);
    /* PVT v1 keeps the size its weights are made for and takes another input, its pos_embed{i} resized; FLatten-PVT,
     * whose positional encodings fix the size, refuses it */
    vt_clearerr(&e);
    const vt_model_cfg *v1 = vt_model_find("pvt_tiny"), *fv1 = vt_model_find("flatten_pvt_tiny");
    ok = vt_model_at_size(v1, 96, 80, &c, &e) == 0 && c.arch.img_size == 224 && c.arch.in_h == 96 &&
         c.arch.in_w == 80;
    T_CHECK(T, ok, "pvt_tiny at 96x80: %s", e.msg);
    vt_params *S = vt_params_new(&e);
    if (S) S->shapes_only = 1;
    g = ok && S ? vt_graph_new(S, 0, &e) : NULL;
    y = g ? vt_model_build(g, &c, 1, &x) : NULL;
    T_CHECK(T, y && x->shape[2] == 96 && x->shape[3] == 80 && vt_params_find(S, "pos_embed1")->shape[1] == 56 * 56,
            "pvt_tiny at 96x80: a (1, 3, 96, 80) input on pos_embed1 of 224 px: %s", g ? g->err.msg : e.msg);
    vt_graph_free(g);
    vt_params_free(S);
    T_CHECK(T, vt_model_at_size(&c, 224, 224, &c, &e) == 0 && c.arch.in_h == 0, "pvt_tiny back at 224: %s", e.msg);
    T_CHECK(T, vt_model_at_size(fv1, 96, 80, &c, &e) == -1 && strstr(e.msg, "weights depend on the image size"),
            "flatten_pvt_tiny at 96x80: %s", e.msg);
    vt_clearerr(&e);
    T_CHECK(T, vt_model_at_size(v1, 24, 80, &c, &e) == -1 && strstr(e.msg, "24x80"), "pvt_tiny at 24x80: %s", e.msg);
}

/* The options a weight file records (vt_model_cfg.options) rebuild the model they were made from: for every named
 * model and every option set it accepts, configuring with the recorded text gives the same architecture and text. */
static void check_options_record(vt_test *T) {
    static const char *const sets[] = {
        "--num-classes 3 --in-chans 3 --img-size 64", "--heads 2", "--dims 32 --depths 1", "--depths 1,1,2,1",
        "--attn flatten", "--attn msf", "--attn hmhsa --double-heads", "--ffn cffn --heads 4,4,8,8",
        "--windows 2", "--windows 2,2,2,1 --img-size 32", "--attn flatten,flatten,mhsa,mhsa", "--apply-transform",
        "--attn gma --num-classes 7", "--img-size 64x96 --num-classes 3"};
    int rebuilt = 0;
    for (int m = 0; m < vt_model_count(); m++) {
        const vt_model_cfg *base = vt_model_at(m);
        for (size_t k = 0; k < sizeof sets / sizeof sets[0]; k++) {
            vt_model_overrides ov = vt_model_no_overrides(), ov2 = vt_model_no_overrides();
            vt_model_cfg c, c2;
            char names[128], names2[128];
            vt_err e = {0}, e2 = {0};
            if (vt_model_parse_options(sets[k], base->arch.nstages, &ov, names, sizeof names, 0, &e) ||
                vt_model_configure(base, &ov, &c, &e))
                continue; /* an option set this model does not take */
            const int rc = vt_model_parse_options(c.options, base->arch.nstages, &ov2, names2, sizeof names2, 1, &e2) ||
                           vt_model_configure(base, &ov2, &c2, &e2);
            T_CHECK(T, rc == 0 && memcmp(&c.arch, &c2.arch, sizeof c.arch) == 0 && strcmp(c.options, c2.options) == 0,
                    "%s '%s': its record '%s' rebuilds %s ('%s')", base->name, sets[k], c.options,
                    rc ? e2.msg : "another architecture", rc ? "" : c2.options);
            rebuilt++;
        }
    }
    T_CHECK(T, rebuilt > 2 * vt_model_count(), "%d option sets rebuilt from their records", rebuilt);
}

/* The eval graph's logits of model `name` (image size S, batch B) with the class-token last block equal those with
 * every token (hMHSA's lead-queries form; cFFN's deployed form, per token), with fewer MACs. */
static void check_all_tokens_eval(vt_test *T, const char *name, int B, int S) {
    vt_err e = {0};
    vt_model_cfg c;
    vt_model_overrides ov = vt_model_no_overrides();
    ov.img_size = S;
    const vt_model_cfg *base = vt_model_find(name);
    vt_params *P = vt_params_new(&e);
    int ok = base && P && vt_model_configure(base, &ov, &c, &e) == 0 && vt_model_init_params(&c, P, 5, &e) == 0;
    T_CHECK(T, ok, "%s: configured: %s", name, e.msg);
    vt_graph *g[2] = {NULL, NULL};
    vt_tensor *x[2] = {NULL, NULL}, *y[2] = {NULL, NULL};
    for (int k = 0; ok && k < 2; k++) {
        g[k] = vt_graph_new(P, 0, &e);
        if (!g[k]) break;
        g[k]->all_tokens = k;
        y[k] = vt_model_build(g[k], &c, B, &x[k]);
        vt_graph_output(g[k], y[k]);
        ok = vt_graph_finalize(g[k], &e) == 0;
        T_CHECK(T, ok, "%s (all_tokens %d): eval graph builds: %s", name, k, e.msg);
    }
    if (ok && g[1]) {
        vt_rng r;
        vt_rng_seed(&r, 23);
        for (int64_t i = 0; i < x[0]->numel; i++) x[0]->data[i] = x[1]->data[i] = vt_rng_normal(&r);
        vt_graph_forward(g[0]);
        vt_graph_forward(g[1]);
        T_CHECK(T, vt_graph_macs(g[0]) < vt_graph_macs(g[1]), "%s: the class-token last block does less (%lld vs %lld "
                "MACs)", name, (long long)vt_graph_macs(g[0]), (long long)vt_graph_macs(g[1]));
        double worst = 0.0, scale = 0.0;
        for (int64_t i = 0; i < y[1]->numel; i++) {
            const double d = fabs((double)y[0]->data[i] - y[1]->data[i]), m = fabs((double)y[1]->data[i]);
            worst = t_worse(worst, d);
            scale = m > scale ? m : scale;
        }
        T_CHECK(T, scale > 0.0 && worst <= 1e-5 * scale, "%s (%d px, batch %d): logits equal every token's graph's "
                "(max difference %.3g, scale %.3g)", name, S, B, worst, scale);
    }
    vt_graph_free(g[0]);
    vt_graph_free(g[1]);
    vt_params_free(P);
}

/* Nodes of g whose kernel is named kern. */
static int count_kernel(const vt_graph *g, const char *kern) {
    int n = 0;
    for (int i = 0; i < g->nn; i++) n += g->nodes[i]->kern && strcmp(g->nodes[i]->kern->name, kern) == 0;
    return n;
}

/* --no-prepack (vt_model_overrides.no_prepack): the eval graph's plan keeps no prepared weight copies, so no linear
 * runs as rule 12's packed 1x1 convolution (the default graph's do where the CPU's rule packs) and, after a forward,
 * it holds no copy (vt_gemm_weight_copy_bytes; the default one does where the rule packs, and in bf16 always), and
 * the logits equal the default graph's within rounding (dtype "bf16": within bf16's where the CPU runs it natively). */
static void check_no_prepack(vt_test *T, const char *name, const char *dtype) {
    vt_err e = {0};
    vt_model_cfg c[2];
    vt_params *P = vt_params_new(&e);
    const vt_model_cfg *base = vt_model_find(name);
    int ok = P && base;
    for (int k = 0; ok && k < 2; k++) {
        vt_model_overrides ov = vt_model_no_overrides();
        ov.dtype = dtype;
        ov.no_prepack = k;
        ok = vt_model_configure(base, &ov, &c[k], &e) == 0;
    }
    ok = ok && vt_model_init_params(&c[0], P, 5, &e) == 0;
    if (!ok && dtype && strstr(e.msg, "native bf16")) { /* no native bf16 here: refused, as --dtype bf16 is */
        vt_params_free(P);
        return;
    }
    T_CHECK(T, ok, "%s --no-prepack: configured: %s", name, e.msg);
    vt_graph *g[2] = {NULL, NULL};
    vt_tensor *x[2] = {NULL, NULL}, *y[2] = {NULL, NULL};
    for (int k = 0; ok && k < 2; k++) {
        g[k] = vt_graph_new(P, 0, &e);
        y[k] = g[k] ? vt_model_build(g[k], &c[k], 2, &x[k]) : NULL;
        if (y[k]) vt_graph_output(g[k], y[k]);
        ok = y[k] && vt_graph_finalize(g[k], &e) == 0;
        if (!ok && g[k] && !e.msg[0]) e = g[k]->err;
        if (!ok && dtype && strstr(e.msg, "bf16")) { /* no native bf16 here: refused, as --dtype bf16 is */
            vt_graph_free(g[0]);
            vt_graph_free(g[1]);
            vt_params_free(P);
            return;
        }
        T_CHECK(T, ok, "%s (%s, no_prepack %d): eval graph builds: %s", name, dtype ? dtype : "fp32", k, e.msg);
    }
    if (ok) {
        const int packs = vt_gemm_linear_packs(&g[0]->gemm), convs = count_kernel(g[0], "linear.onednn_conv1x1");
        T_CHECK(T, g[0]->gemm.prepack == 1 && g[1]->gemm.prepack == 0 && c[1].arch.no_prepack == 1,
                "%s: the option reaches the plan", name);
        T_CHECK(T, (convs > 0) == (packs != 0) && count_kernel(g[1], "linear.onednn_conv1x1") == 0,
                "%s (%s): packed 1x1 convs %d by default (the rule packs: %d), %d with --no-prepack", name,
                dtype ? dtype : "fp32", convs, packs, count_kernel(g[1], "linear.onednn_conv1x1"));
        vt_rng r;
        vt_rng_seed(&r, 29);
        for (int64_t i = 0; i < x[0]->numel; i++) x[0]->data[i] = x[1]->data[i] = vt_rng_normal(&r);
        vt_graph_forward(g[0]);
        vt_graph_forward(g[1]);
        double worst = 0.0, scale = 0.0;
        for (int64_t i = 0; i < y[1]->numel; i++) {
            worst = t_worse(worst, fabs((double)y[0]->data[i] - y[1]->data[i]));
            scale = fmax(scale, fabs((double)y[0]->data[i]));
        }
        const size_t c0 = vt_gemm_weight_copy_bytes(&g[0]->gemm), c1 = vt_gemm_weight_copy_bytes(&g[1]->gemm);
        T_CHECK(T, (c0 > 0) == (dtype || packs) && c1 == 0, "%s (%s): weight copies %zu bytes by default, %zu with "
                "--no-prepack", name, dtype ? dtype : "fp32", c0, c1);
        const double tol = dtype ? 2e-2 : 1e-5;
        T_CHECK(T, scale > 0.0 && worst <= tol * scale, "%s (%s): logits with --no-prepack off by %.3g (scale %.3g)",
                name, dtype ? dtype : "fp32", worst, scale);
    }
    vt_graph_free(g[0]);
    vt_graph_free(g[1]);
    vt_params_free(P);
}

/* Each family's weight-decay rule (vt_family.no_decay) on full-size named models (shapes only), as the official
 * code's no_weight_decay() plus timm's 1-D rule make it: PVT v1's and FLatten-PVT's cls_token (their pos_embed1-4
 * decayed: whai362/PVT and FLatten's flatten_pvt.py return {'cls_token'}), Refined-ViT's and DeiT's
 * pos_embed and cls_token are not decayed; CSwin has only the 1-D rule; SimpleViT (the MSF recipe, spec-msf §4.4)
 * decays every parameter, biases and norms included. */
static void check_no_decay(vt_test *T) {
    static const struct {
        const char *model, *param;
        int no_decay;
    } cases[] = {
        {"pvt_tiny", "pos_embed1", 0},
        {"pvt_tiny", "pos_embed4", 0},
        {"flatten_pvt_small", "pos_embed2", 0},
        {"pvt_tiny", "cls_token", 1},
        {"pvt_tiny", "block1.0.attn.q.weight", 0},
        {"pvt_tiny", "block1.0.attn.sr.weight", 0},
        {"pvt_tiny", "block1.0.norm1.bias", 1},
        {"pvt_v2_b1", "patch_embed1.proj.weight", 0},
        {"pvt_v2_b1", "norm4.weight", 1},
        {"refiner_vit_s", "pos_embed", 1},
        {"refiner_vit_s", "cls_token", 1},
        {"refiner_vit_s", "blocks.0.attn.qkv.weight", 0},
        {"refiner_vit_s", "blocks.0.mlp.scale_channel", 1},
        {"deit_tiny_patch16_224", "pos_embed", 1},
        {"deit_tiny_patch16_224", "cls_token", 1},
        {"deit_tiny_patch16_224", "blocks.0.mlp.fc1.weight", 0},
        {"simplevit_ti_msf", "linear_head.0.weight", 0},
        {"simplevit_ti_msf", "linear_head.1.bias", 0},
        {"simplevit_ti_msf", "to_patch_embedding.2.weight", 0},
        {"cswin_tiny_224", "stage1.0.qkv.weight", 0},
        {"cswin_tiny_224", "stage1.0.qkv.bias", 1},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        vt_err e = {0};
        vt_params *P = vt_params_new(&e);
        const vt_model_cfg *c = vt_model_find(cases[k].model);
        if (P) P->shapes_only = 1; /* names and shapes only: full-size models in no time */
        const int ok = P && c && vt_model_create_params(c, P, &e) == 0;
        T_CHECK(T, ok, "%s: parameters: %s", cases[k].model, e.msg);
        const vt_tensor *t = ok ? vt_params_find(P, cases[k].param) : NULL;
        T_CHECK(T, !ok || (t && t->kind == VT_PARAM && t->no_decay == cases[k].no_decay), "%s: %s no_decay %d, want %d",
                cases[k].model, cases[k].param, t ? t->no_decay : -1, cases[k].no_decay);
        vt_params_free(P);
    }
}

/* Stochastic depth over the whole network (timm's linspace(0, rate, blocks), stages counted together): block k of n
 * drops its attention branch with probability rate·k/(n−1). Measured per block over 400 train steps of one sample
 * (seeds 0..399): a step dropped the branch iff the block's attention projection gets no gradient. Rate 0.9; the
 * bound 0.1 is 4 binomial standard deviations (the seeds are fixed: the counts are the same on every run). */
static void check_drop_path_schedule(vt_test *T, const char *name, const char *probe_fmt, int stages,
                                     const int *depth) {
    enum { STEPS = 400, MAXB = 8 };
    vt_err e = {0};
    vt_model_cfg c;
    vt_model_overrides ov = vt_model_no_overrides();
    ov.drop_path = 0.9f;
    vt_params *P = vt_params_new(&e);
    int ok = P && vt_model_configure(vt_model_find(name), &ov, &c, &e) == 0 && vt_model_init_params(&c, P, 3, &e) == 0;
    const vt_tensor *probe[MAXB] = {NULL};
    int n = 0;
    for (int i = 0; ok && i < stages; i++)
        for (int j = 0; j < depth[i] && n < MAXB; j++, n++) {
            char nm[VT_NAMELEN];
            if (stages > 1)
                snprintf(nm, sizeof nm, probe_fmt, i, j);
            else
                snprintf(nm, sizeof nm, probe_fmt, j);
            probe[n] = vt_params_find(P, nm);
            ok = probe[n] != NULL && probe[n]->kind == VT_PARAM;
            T_CHECK(T, ok, "%s: parameter %s", name, nm);
        }
    const int B = 1;
    vt_tensor *x = NULL, *lab = NULL;
    vt_graph *g = ok ? vt_graph_new(P, 1, &e) : NULL;
    if (g) {
        vt_tensor *y = vt_model_build(g, &c, B, &x);
        lab = vt_input(g, "labels", 1, &B);
        vt_graph_set_loss(g, vt_cross_entropy(g, y, lab, 0.0f));
        vt_graph_output(g, y);
        ok = vt_graph_finalize(g, &e) == 0;
        for (int k = 0; ok && k < n; k++) ok = probe[k]->grad != NULL;
    }
    T_CHECK(T, ok && g, "%s: train graph with drop-path 0.9 (gradients of the probes): %s", name,
            g && g->err.msg[0] ? g->err.msg : e.msg);
    int dropped[MAXB] = {0};
    vt_rng r;
    vt_rng_seed(&r, 5);
    for (int64_t i = 0; ok && g && i < x->numel; i++) x->data[i] = vt_rng_normal(&r);
    if (lab) lab->data[0] = 1.0f;
    for (int s = 0; ok && g && s < STEPS; s++) {
        g->seed = (uint64_t)s;
        vt_graph_forward(g);
        vt_params_zero_grad(P);
        vt_graph_backward(g);
        for (int k = 0; k < n; k++) {
            int zero = 1;
            for (int64_t i = 0; zero && i < probe[k]->numel; i++) zero = probe[k]->grad[i] == 0.0f;
            dropped[k] += zero;
        }
    }
    for (int k = 0; ok && g && k < n; k++) {
        const double want = 0.9 * k / (n - 1), got = (double)dropped[k] / STEPS;
        T_CHECK(T, fabs(got - want) <= 0.1, "%s: block %d of %d drops its attention branch in %.3f of the steps, want "
                "%.3f (drop-path 0.9 linear over all blocks)", name, k, n, got, want);
    }
    vt_graph_free(g);
    vt_params_free(P);
}

void test_registry(vt_test *T) {
    check_no_decay(T);
    static const int vit_depth[1] = {4}, swin_depth[2] = {2, 2};
    check_drop_path_schedule(T, "vit_fmnist_tiny", "blocks.%d.attn.proj.weight", 1, vit_depth);
    check_drop_path_schedule(T, "swin_fmnist_tiny", "layers.%d.blocks.%d.attn.proj.weight", 2, swin_depth);
    check_no_prepack(T, "vit_fmnist_p7", NULL);
    check_no_prepack(T, "swin_fmnist_tiny", NULL);
    check_no_prepack(T, "vit_fmnist_p7", "bf16");
    check_option_kinds(T);
    check_nonsquare(T);
    check_nearest(T);
    check_parse_size(T);
    check_options_record(T);
    check_all_tokens(T, "vit_fmnist_p7", NULL);
    check_all_tokens(T, "deit_tiny_patch16_224", NULL);
    check_all_tokens(T, "vit_fmnist_p7", "hmhsa");
    check_all_tokens(T, "vit_fmnist_p7", "flatten");
    check_all_tokens(T, "vit_fmnist_p7", "msf");
    check_all_tokens(T, "vit_fmnist_p7", "msf_g2");
    check_all_tokens(T, "vit_fmnist_p7", "orig");
    check_all_tokens_eval(T, "flatten_deit_tiny", 2, 64);
    check_all_tokens_eval(T, "deit_tiny_hmhsa_cffn", 2, 64);
    check_all_tokens_eval(T, "deit_tiny_hmhsa_cffn", 3, 224);
    T_CHECK(T, vt_model_count() > 0, "models registered");
    vt_model_cfg *done = calloc((size_t)vt_model_count(), sizeof *done);
    int n = 0;
    T_CHECK(T, done != NULL, "out of memory");
    for (int i = 0; done && i < vt_model_count(); i++) sweep_one(T, vt_model_at(i), done, &n, 0);
    for (int i = 0, m = 0; done && i < vt_model_count(); i++) sweep_one(T, vt_model_at(i), done, &m, 1);
    free(done);
}
