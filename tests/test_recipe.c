/* Training-recipe pieces: model EMA against a direct computation, gradient accumulation against one large batch,
 * recipe presets and overrides, the fine-tuning loader's adaptations and errors, the bicubic resize's invariants. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test.h"
#include "vitc/adapt.h"
#include "vitc/ema.h"
#include "vitc/model.h"
#include "vitc/ops.h"
#include "vitc/recipe.h"
#include "vitc/sampler.h"
#include "vitc/train.h"
#include "vitc/weights.h"

/* Elements of every tensor in P. */
static int64_t params_numel(const vt_params *P) {
    int64_t n = 0;
    for (int i = 0; i < P->n; i++) n += P->t[i]->numel;
    return n;
}

/* A copy of every tensor of P, one after another (NULL when out of memory). */
static float *params_copy(const vt_params *P) {
    float *c = malloc(sizeof(float) * (size_t)(params_numel(P) + 1)), *w = c;
    for (int i = 0; c && i < P->n; w += P->t[i]->numel, i++)
        memcpy(w, P->t[i]->data, sizeof(float) * (size_t)P->t[i]->numel);
    return c;
}

/* EMA over a parameter, a float buffer and an integer buffer, three updates, against the recurrence in double; a
 * fixed buffer (part of the architecture, e.g. Swin's attn_mask) is copied, not averaged: the EMA holds its latest
 * values exactly. */
static void check_ema(vt_test *T) {
    vt_err e = {0};
    vt_params *P = vt_params_new(&e);
    const int s3[1] = {3}, s1[1] = {1};
    vt_tensor *w = vt_params_add(P, "w", VT_PARAM, 1, s3, (vt_init){VT_INIT_ZERO, 0}, &e);
    vt_tensor *rm = vt_params_add(P, "bn.running_mean", VT_BUFFER, 1, s3, (vt_init){VT_INIT_ZERO, 0}, &e);
    vt_tensor *nb = vt_params_add(P, "bn.num_batches_tracked", VT_BUFFER, 0, s1, (vt_init){VT_INIT_ZERO, 0}, &e);
    nb->is_i64 = 1;
    vt_tensor *fx = vt_params_add(P, "attn_mask", VT_BUFFER, 1, s3, (vt_init){VT_INIT_FIXED, 0}, &e);
    for (int i = 0; i < 3; i++) w->data[i] = (float)(i + 1), rm->data[i] = (float)(-i), fx->data[i] = -100.0f;
    vt_ema m;
    T_CHECK(T, vt_ema_init(&m, P, 0.9, &e) == 0, "%s", e.msg);
    double ew[3] = {1, 2, 3}, er[3] = {0, -1, -2};
    for (int step = 0; step < 3; step++) {
        for (int i = 0; i < 3; i++) {
            w->data[i] += 0.5f * (float)(step + i);
            rm->data[i] = (float)(step * i);
            ew[i] = 0.9 * ew[i] + 0.1 * w->data[i];
            er[i] = 0.9 * er[i] + 0.1 * rm->data[i];
        }
        nb->data[0] += 1;
        for (int i = 0; i < 3; i++) fx->data[i] = (float)(step * 3 + i) / 7.0f;
        vt_ema_update(&m, P);
    }
    double err = 0;
    for (int i = 0; i < 3; i++)
        err = t_worse(t_worse(err, fabs(m.P->t[0]->data[i] - ew[i])), fabs(m.P->t[1]->data[i] - er[i]));
    T_CHECK(T, err < 1e-5, "EMA of parameters and running stats off by %g", err);
    T_CHECK(T, m.P->t[2]->data[0] == 3.0f, "num_batches_tracked copied, got %g", (double)m.P->t[2]->data[0]);
    T_CHECK(T, memcmp(m.P->t[3]->data, fx->data, sizeof(float) * 3) == 0, "fixed buffer copied, got %g %g %g",
            (double)m.P->t[3]->data[0], (double)m.P->t[3]->data[1], (double)m.P->t[3]->data[2]);
    T_CHECK(T, strcmp(m.P->t[1]->name, "bn.running_mean") == 0 && m.P->t[2]->is_i64, "names and flags kept");
    vt_ema bad;
    T_CHECK(T, vt_ema_init(&bad, P, 1.5, &e) != 0 && strstr(e.msg, "decay"), "decay 1.5 refused: %s", e.msg);
    vt_ema_free(&m);
    vt_params_free(P);
}

/* N micro-batches of B accumulated == one batch of N·B (vit_fmnist_tiny: LayerNorm only), ≤ 1e-5 relative. */
static void check_accum(vt_test *T) {
    vt_err e = {0};
    const vt_model_cfg *base = vt_model_find("vit_fmnist_tiny");
    T_CHECK(T, base != NULL, "vit_fmnist_tiny registered");
    if (!base) return;
    vt_model_cfg c = *base;
    const int B = 3, N = 4, img = 28 * 28;
    float *x = malloc(sizeof(float) * (size_t)B * N * img), lab[12], l1[1], l2;
    vt_rng r;
    vt_rng_seed(&r, 5);
    for (int i = 0; i < B * N * img; i++) x[i] = vt_rng_normal(&r);
    for (int i = 0; i < B * N; i++) lab[i] = (float)vt_rng_below(&r, 10);
    vt_params *P1 = vt_params_new(&e), *P2 = vt_params_new(&e);
    int ok = vt_model_init_params(&c, P1, 3, &e) == 0 && vt_model_init_params(&c, P2, 3, &e) == 0 &&
             vt_grad_steps(&c, P1, x, lab, B * N, 1, 0, 0, l1, &e) == 0 &&
             vt_grad_accum(&c, P2, x, lab, B, N, &l2, &e) == 0;
    T_CHECK(T, ok, "%s", e.msg);
    double worst = 0, gmax = 0;
    for (int i = 0; ok && i < P1->n; i++) {
        const vt_tensor *a = P1->t[i], *b = P2->t[i];
        if (!a->grad) continue;
        for (int64_t k = 0; k < a->numel; k++) {
            worst = t_worse(worst, fabs((double)a->grad[k] - b->grad[k]));
            gmax = fmax(gmax, fabs(a->grad[k]));
        }
    }
    T_CHECK(T, ok && worst <= 1e-5 * gmax && gmax > 0, "accumulated gradients differ by %g (max |grad| %g)", worst, gmax);
    T_CHECK(T, ok && fabs(l1[0] - l2) <= 1e-5 * fabs(l1[0]), "loss %g vs %g", (double)l1[0], (double)l2);
    T_CHECK(T, vt_grad_accum(&c, P2, x, lab, B, 0, &l2, &e) != 0, "accum 0 refused");
    const float keep = lab[1];
    lab[1] = (float)c.arch.num_classes; /* past the last class: its loss would read past the logits */
    e = (vt_err){0};
    T_CHECK(T, vt_grad_steps(&c, P1, x, lab, B * N, 1, 0, 0, l1, &e) != 0 && strstr(e.msg, "label 10 of sample 1"),
            "an out-of-range label refused by vt_grad_steps: %s", e.msg);
    lab[1] = 0.5f;
    e = (vt_err){0};
    T_CHECK(T, vt_grad_accum(&c, P2, x, lab, B, N, &l2, &e) != 0 && strstr(e.msg, "label 0.5 of sample 1"),
            "a fractional label refused by vt_grad_accum: %s", e.msg);
    lab[1] = keep;
    vt_params_free(P1);
    vt_params_free(P2);
    free(x);
}

static void check_recipes(vt_test *T) {
    vt_err e = {0};
    vt_recipe r;
    for (int i = 0; i < vt_recipe_count(); i++)
        T_CHECK(T, vt_recipe_get(vt_recipe_name(i), NULL, &r, &e) == 0 && strcmp(r.name, vt_recipe_name(i)) == 0,
                "preset %s: %s", vt_recipe_name(i), e.msg);
    T_CHECK(T, vt_recipe_get("deit", "deit_tiny_patch16_224", &r, &e) == 0, "%s", e.msg);
    T_CHECK(T, fabs(vt_recipe_lr(&r) - 5e-4 * 64 / 512) < 1e-12 && r.epochs == 300 && r.warmup_epochs == 5 &&
                   r.mixup.mixup_alpha == 0.8 && r.mixup.cutmix_alpha == 1.0 && r.mixup.switch_prob == 0.5 &&
                   r.model_ema && r.model_ema_decay == 0.99996 && r.drop_path == 0.1 && r.reprob == 0.25 &&
                   !strcmp(r.aa, "rand-m9-mstd0.5-inc1") && r.smoothing == 0.1 && r.min_lr == 1e-5,
            "deit preset: lr %g", vt_recipe_lr(&r));
    r.batch = 256;
    r.accum_steps = 4;
    T_CHECK(T, fabs(vt_recipe_lr(&r) - 1e-3) < 1e-12, "lr scales with batch × accum: %g", vt_recipe_lr(&r));
    r.batch = 64;
    r.accum_steps = 1;
    r.world_size = 8; /* DeiT's 8 GPUs × 64: the global batch 512 */
    T_CHECK(T, fabs(vt_recipe_lr(&r) - 5e-4) < 1e-12, "lr scales with the ranks' global batch: %g", vt_recipe_lr(&r));
    r.world_size = 0;
    r.lr = 3e-4;
    r.lr_given = 1;
    T_CHECK(T, vt_recipe_lr(&r) == 3e-4, "an explicit --lr is used as given");
    vt_train_opts o;
    vt_train_defaults(&o);
    T_CHECK(T, vt_recipe_get("swin", "swin_tiny_patch4_window7_224", &r, &e) == 0, "%s", e.msg);
    vt_recipe_apply(&r, &o);
    T_CHECK(T, o.clip_grad == 5.0 && o.warmup_epochs == 20 && fabs(o.lr - 1.25e-4) < 1e-12 &&
                   fabs(o.min_lr - 5e-6 * 0.25) < 1e-15 && fabs(o.warmup_lr - 5e-7 * 0.25) < 1e-15 && !o.model_ema &&
                   r.drop_path < 0 && o.recipe == &r,
            "swin preset applied: lr %g min %g", o.lr, o.min_lr);
    r.min_lr = 1e-5;
    r.min_lr_given = 1;
    vt_recipe_apply(&r, &o);
    T_CHECK(T, o.min_lr == 1e-5 && fabs(o.warmup_lr - 5e-7 * 0.25) < 1e-15,
            "an explicit --min-lr is used as given, the recipe's warm-up lr still scaled: min %g warm-up %g", o.min_lr,
            o.warmup_lr);
    r.warmup_lr = 2e-6;
    r.warmup_lr_given = 1;
    vt_recipe_apply(&r, &o);
    T_CHECK(T, o.warmup_lr == 2e-6 && o.min_lr == 1e-5, "an explicit --warmup-lr is used as given: %g", o.warmup_lr);
    /* the official training drop-path rates live in the named configs (the yaml files'; Refiner's _dense models: its
     * relabel files'), with or without a recipe, which keeps them (-1) */
    const char *gm[] = {"groupmixformer_m",   "groupmixformer_t",    "groupmixformer_s",    "groupmixformer_b",
                        "groupmixformer_l",   "groupmixformer_base", "refiner_vit_s",       "refined_vit_m",
                        "refiner_vit_l",      "refiner_vit_s_dense", "refiner_vit_m_dense", "refiner_vit_l_dense"};
    const float dp[] = {0.1f, 0.1f, 0.2f, 0.5f, 0.1f, 0.5f, 0.1f, 0.2f, 0.25f, 0.2f, 0.25f, 0.25f};
    for (int i = 0; i < 12; i++) {
        const vt_model_cfg *mc = vt_model_find(gm[i]);
        const int gmf = i < 6;
        T_CHECK(T, mc && mc->arch.drop_path == dp[i] &&
                       vt_recipe_get(gmf ? "groupmixformer" : "refiner", gm[i], &r, &e) == 0 && r.drop_path == -1 &&
                       r.clip_grad == (gmf ? 5 : 0),
                "%s drop-path %g (recipe %g)", gm[i], mc ? mc->arch.drop_path : -2, r.drop_path);
    }
    /* MSF's train.py clips the gradient norm at 1 by default; its Swin hosts keep torchvision's stochastic depth */
    T_CHECK(T, vt_recipe_get("msf", "swin_s_msf", &r, &e) == 0 && r.mixup.mixup_alpha == 0.2 && r.lr_base_batch == 0 &&
                   r.epochs == 100 && r.drop_path == -1 && r.clip_grad == 1.0 &&
                   vt_model_find("swin_s_msf")->arch.drop_path == 0.3f &&
                   vt_model_find("simplevit_s_msf")->arch.drop_path == 0.0f,
            "msf preset: drop-path %g, clip %g", r.drop_path, r.clip_grad);
    /* ... and decays every parameter, as its train.py (no --norm-weight-decay), the Swin hosts' tables and norms too */
    vt_params *SP = vt_params_new(&e);
    int kept = 0, left = -1;
    if (SP) SP->shapes_only = 1;
    if (SP && vt_model_create_params(vt_model_find("swin_t_msf"), SP, &e) == 0) {
        vt_recipe sw;
        T_CHECK(T, vt_recipe_get("swin", "swin_t_msf", &sw, &e) == 0 && vt_recipe_decay(&sw, SP) == 0, "%s", e.msg);
        for (int i = 0; i < SP->n; i++) kept += SP->t[i]->no_decay; /* the family's: norms, biases, bias tables */
        vt_recipe_decay(&r, SP);
        left = 0;
        for (int i = 0; i < SP->n; i++) left += SP->t[i]->no_decay;
    }
    T_CHECK(T, r.decay_all && kept > 0 && left == 0,
            "msf decays every parameter of swin_t_msf: %d of the swin recipe's %d no-decay ones left", left, kept);
    vt_params_free(SP);
    T_CHECK(T, vt_recipe_get("groupmixformer", "groupmixformer_s", &r, &e) == 0 && r.batch == 64 &&
                   fabs(vt_recipe_lr(&r) - 5e-4 * 64 / 512) < 1e-12 && r.color_jitter == 0.4,
            "groupmixformer preset: batch %d", r.batch);
    /* hMHSA + cFFN trains with its host's recipe: PVT's main.py for PVTv2-b1, Next-ViT's for Next-ViT-S */
    T_CHECK(T, vt_recipe_get("hmhsa", "pvt_v2_b1_hmhsa_cffn", &r, &e) == 0 && r.batch == 128 && !r.model_ema &&
                   r.clip_grad == 0 && r.repeated_aug && r.warmup_epochs == 5 && r.drop_path == -1 &&
                   strstr(r.source, "PVT"),
            "hmhsa in PVTv2: batch %d, EMA %d, source %s", r.batch, r.model_ema, r.source);
    T_CHECK(T, vt_recipe_get("hmhsa", "nextvit_small_hmhsa_cffn", &r, &e) == 0 && r.batch == 256 && !r.model_ema &&
                   r.clip_grad == 5 && !r.repeated_aug && r.warmup_epochs == 20 && r.weight_decay == 0.1 &&
                   r.drop_path == -1 && strstr(r.source, "Next-ViT"),
            "hmhsa in Next-ViT: batch %d, warm-up %g, wd %g, source %s", r.batch, r.warmup_epochs, r.weight_decay,
            r.source);
    T_CHECK(T, vt_recipe_get("hmhsa", "deit_tiny_hmhsa_cffn", &r, &e) == 0 && r.batch == 64 && r.model_ema &&
                   r.drop_path == 0.1 && strstr(r.source, "DeiT"),
            "hmhsa in DeiT: %s", r.source);
    /* the per-model values of the FLatten presets (the yaml files' batch, the README's EMA decays) and the colour
     * jitter each preset records */
    const struct { const char *recipe, *model; int batch; double ema, jitter; } per[] = {
        {"flatten", "flatten_pvt_small", 64, 0.99996, 0.4}, {"flatten", "flatten_pvt_tiny", 128, 0.99996, 0.4},
        {"flatten", "flatten_cswin_base", 64, 0.99982, 0.4}, {"flatten", "flatten_cswin_tiny", 256, 0.99984, 0.4},
        {"refiner", "refiner_vit_s", 32, 0.99996, 0.4},       {"pvt", "pvt_v2_b1", 128, 0.99996, 0.4},
        {"nextvit", "nextvit_small", 256, 0.99996, 0.4},      {"deit", "deit_tiny_patch16_224", 64, 0.99996, 0.3}};
    for (size_t i = 0; i < sizeof per / sizeof per[0]; i++)
        T_CHECK(T, vt_recipe_get(per[i].recipe, per[i].model, &r, &e) == 0 && r.batch == per[i].batch &&
                       r.model_ema_decay == per[i].ema && r.color_jitter == per[i].jitter,
                "%s for %s: batch %d, EMA decay %g, colour jitter %g", per[i].recipe, per[i].model, r.batch,
                r.model_ema_decay, r.color_jitter);
    vt_train_opts ro;
    vt_train_defaults(&ro);
    vt_recipe_get("deit", "deit_tiny_patch16_224", &r, &e);
    vt_recipe_apply(&r, &ro);
    T_CHECK(T, ro.repeated_aug == 3, "DeiT's RASampler repeats each image 3 times: %d", ro.repeated_aug);
    T_CHECK(T, vt_recipe_get("nextvit", "nextvit_base", &r, &e) == 0 && r.drop_path == -1 &&
                   vt_model_find("nextvit_base")->arch.drop_path == 0.2f &&
                   vt_recipe_get("pvt", "pvt_v2_b1", &r, &e) == 0 && r.batch == 128,
            "nextvit and pvt presets");
    /* per-model presets by the model's name or alias, never by a substring of another model's */
    const struct { const char *recipe, *model; double dp; int cooldown, ema; } by_model[] = {
        {"refiner", "refiner_vit_m", -1, 10, 1}, {"refiner", "refined_vit_m", -1, 10, 1},
        {"refiner", "refined_vit_l", -1, 10, 1}, {"refiner", "simplevit_s_msf", -1, 10, 1},
        {"flatten", "flatten_cswin_tiny", -1, 10, 1}, {"flatten", "FLatten_CSWin_64_24181_tiny_224", -1, 10, 1},
        {"flatten", "cswin_tiny_224", -1, 0, 0}, {"flatten", "pvt_tiny", -1, 0, 0},
        {"flatten", "flatten_pvt_tiny", -1, 10, 0}, {"flatten", "flatten_deit_tiny", 0.1, 0, 1}};
    for (size_t i = 0; i < sizeof by_model / sizeof by_model[0]; i++)
        T_CHECK(T, vt_recipe_get(by_model[i].recipe, by_model[i].model, &r, &e) == 0 &&
                       r.drop_path == by_model[i].dp && r.cooldown_epochs == by_model[i].cooldown &&
                       r.model_ema == by_model[i].ema,
                "%s for %s: drop-path %g, cooldown %d, EMA %d", by_model[i].recipe, by_model[i].model, r.drop_path,
                r.cooldown_epochs, r.model_ema);
    /* FLatten on DeiT (no config in its repo) trains with its host's recipe, DeiT's: not Swin's 20 warm-up epochs */
    T_CHECK(T, vt_recipe_get("flatten", "flatten_deit_tiny", &r, &e) == 0 && r.warmup_epochs == 5 && r.clip_grad == 0 &&
                   r.repeated_aug && strstr(r.source, "DeiT"),
            "flatten for flatten_deit_tiny: warm-up %g, clip %g, source %s", r.warmup_epochs, r.clip_grad, r.source);
    T_CHECK(T, vt_recipe_get("nope", NULL, &r, &e) != 0 && strstr(e.msg, "deit"), "unknown recipe: %s", e.msg);
    char path[] = "/tmp/vitc-recipe-XXXXXX";
    int fd = mkstemp(path);
    if (fd >= 0) close(fd);
    vt_recipe_get("deit", NULL, &r, &e);
    T_CHECK(T, fd >= 0 && vt_recipe_save(&r, path, &e) == 0, "recipe.json written: %s", e.msg);
    FILE *f = fopen(path, "r");
    char buf[4096] = "";
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    buf[n] = '\0';
    if (f) fclose(f);
    T_CHECK(T, strstr(buf, "\"mixup_switch_prob\":\t0.5") && strstr(buf, "\"aa\":\t\"rand-m9-mstd0.5-inc1\""),
            "recipe.json holds the settings: %.200s", buf);
    unlink(path);
}

/* A recipe's per-image knobs become the transforms' parameters (timm's RandAugment string parsed). */
static void check_recipe_transforms(vt_test *T) {
    vt_err e = {0};
    vt_recipe r;
    vt_tf_params p;
    vt_recipe_get("deit", NULL, &r, &e);
    const vt_tf_params d = vt_tf_deit(224);
    T_CHECK(T, vt_recipe_transforms(&r, 224, &p, &e) == 0 && p.ra_layers == 2 && p.ra_magnitude == 9.0f &&
                   p.ra_mstd == 0.5f && p.ra_prob == 0.5f && p.re_prob == 0.25f && p.interp == VT_INTERP_BICUBIC &&
                   p.scale[0] == d.scale[0] && p.ratio[1] == d.ratio[1] && p.hflip == 0.5f && p.size == 224,
            "deit recipe = vt_tf_deit: %s", e.msg);
    /* timm gives RandAugment the train interpolation: Refiner's random stays random (RandAugment's own random choice
     * of bilinear / bicubic), a bilinear recipe's is bilinear */
    vt_recipe rf;
    vt_recipe_get("refiner", NULL, &rf, &e);
    T_CHECK(T, vt_recipe_transforms(&rf, 224, &p, &e) == 0 && p.interp == VT_INTERP_RANDOM &&
                   p.ra_interp == VT_INTERP_RANDOM && p.ra_layers == 2,
            "refiner: interpolation %d, RandAugment's %d: %s", p.interp, p.ra_interp, e.msg);
    snprintf(rf.interpolation, sizeof rf.interpolation, "bilinear");
    T_CHECK(T, vt_recipe_transforms(&rf, 224, &p, &e) == 0 && p.interp == VT_INTERP_BILINEAR &&
                   p.ra_interp == VT_INTERP_BILINEAR,
            "bilinear: interpolation %d, RandAugment's %d: %s", p.interp, p.ra_interp, e.msg);
    snprintf(r.aa, sizeof r.aa, "rand-n3-m7-inc1");
    T_CHECK(T, vt_recipe_transforms(&r, 32, &p, &e) == 0 && p.ra_layers == 3 && p.ra_magnitude == 7.0f &&
                   p.ra_mstd == 0.0f, "rand-n3-m7-inc1: %s", e.msg);
    r.aa[0] = '\0';
    T_CHECK(T, vt_recipe_transforms(&r, 32, &p, &e) == 0 && p.ra_layers == 0, "no aa: RandAugment off");
    vt_recipe_get("msf", NULL, &r, &e);
    T_CHECK(T, vt_recipe_transforms(&r, 32, &p, &e) == 0 && p.three && p.ra_layers == 0 &&
                   p.interp == VT_INTERP_BILINEAR && p.re_prob == 0.0f, "msf: the three-augment: %s", e.msg);
    snprintf(r.aa, sizeof r.aa, "augmix");
    T_CHECK(T, vt_recipe_transforms(&r, 32, &p, &e) != 0 && strstr(e.msg, "'augmix' is not implemented"),
            "another policy refused: %s", e.msg);
}

/* The bicubic resize keeps a constant grid constant and a same-size resize exact (the interpolation itself is
 * checked against torch in tests/reference/test_recipe.py). */
static void check_bicubic(vt_test *T) {
    float src[5 * 5 * 2], dst[9 * 9 * 2];
    for (int i = 0; i < 50; i++) src[i] = i % 2 ? 3.0f : -1.0f;
    vt_resize_bicubic(src, 5, 5, 2, dst, 9, 9);
    double err = 0;
    for (int i = 0; i < 162; i++) err = t_worse(err, fabs(dst[i] - (i % 2 ? 3.0 : -1.0)));
    T_CHECK(T, err < 1e-6, "constant grid stays constant: %g", err);
    for (int i = 0; i < 50; i++) src[i] = (float)(i * 0.37 - 4);
    vt_resize_bicubic(src, 5, 5, 2, dst, 5, 5);
    err = 0;
    for (int i = 0; i < 50; i++) err = t_worse(err, fabs(dst[i] - src[i]));
    T_CHECK(T, err < 1e-6, "same size is the identity: %g", err);
}

/* Fine-tuning loader: a saved 10-class vit_fmnist_tiny loads into a 2-class model at 36×36 with the head
 * re-initialised and pos_embed resized; an unrelated model's file is refused, naming the tensors. */
static void check_adapt(vt_test *T) {
    vt_err e = {0};
    const vt_model_cfg *base = vt_model_find("vit_fmnist_tiny");
    vt_model_overrides ov = vt_model_no_overrides();
    vt_model_cfg c10 = *base, c2;
    ov.num_classes = 2;
    ov.img_size = 36;
    T_CHECK(T, vt_model_configure(base, &ov, &c2, &e) == 0, "%s", e.msg);
    char path[] = "/tmp/vitc-adapt-XXXXXX";
    int fd = mkstemp(path);
    if (fd >= 0) close(fd);
    vt_params *P10 = vt_params_new(&e), *P2 = vt_params_new(&e), *Q = vt_params_new(&e);
    int ok = vt_model_init_params(&c10, P10, 1, &e) == 0 && vt_params_save(P10, path, &e) == 0 &&
             vt_model_init_params(&c2, P2, 2, &e) == 0;
    T_CHECK(T, ok, "%s", e.msg);
    vt_tensor *h = vt_params_find(P2, "head.weight");
    float h0 = h ? h->data[0] : 0;
    T_CHECK(T, ok && vt_adapt_load(P2, 2, c2.arch.in_chans, 0, 0, path, NULL, &e) == 0, "adapt load: %s", e.msg);
    T_CHECK(T, h && h->data[0] == h0, "head kept its fresh initialisation");
    const vt_tensor *pe = vt_params_find(P2, "pos_embed"), *pe10 = vt_params_find(P10, "pos_embed");
    T_CHECK(T, pe && pe10 && pe->shape[1] == 82 && pe10->shape[1] == 50 &&
                   memcmp(pe->data, pe10->data, sizeof(float) * (size_t)pe->shape[2]) == 0,
            "pos_embed resized 7x7 -> 9x9 with the class row kept");
    const vt_tensor *q1 = vt_params_find(P2, "blocks.0.attn.qkv.weight"), *q0 = vt_params_find(P10, "blocks.0.attn.qkv.weight");
    T_CHECK(T, q1 && q0 && memcmp(q1->data, q0->data, sizeof(float) * (size_t)q0->numel) == 0, "other tensors loaded");
    ok = vt_model_init_params(vt_model_find("swin_fmnist_tiny"), Q, 1, &e) == 0;
    T_CHECK(T, ok && vt_adapt_load(Q, 10, 1, 0, 0, path, NULL, &e) != 0 && strstr(e.msg, "missing") && /* 1 channel */
                   strstr(e.msg, "unexpected") && strstr(e.msg, "pos_embed") &&
                   strstr(e.msg, "it holds the weights of vit_fmnist_tiny, not swin_fmnist_tiny"),
            "another model's weights refused, naming it and the tensors: %s", e.msg);
    T_CHECK(T, vt_adapt_load(P10, 10, c10.arch.in_chans, 0, 0, "/nonexistent/w.safetensors", NULL, &e) != 0,
            "missing file refused");
    /* a tensor loaded as it is gets the strict loader's checks, also when others are adapted (the head here) */
    vt_params *G = vt_params_new(&e), *G2 = vt_params_new(&e);
    const vt_model_cfg *gb = vt_model_find("groupmixformer_test");
    vt_model_cfg g2;
    ov = vt_model_no_overrides();
    ov.num_classes = 2;
    ok = G && G2 && vt_model_configure(gb, &ov, &g2, &e) == 0 && vt_model_init_params(gb, G, 1, &e) == 0 &&
         vt_model_init_params(&g2, G2, 2, &e) == 0; /* another seed: loading would change it */
    vt_tensor *rv = ok ? vt_params_find(G, "conv_stem.norm1.running_var") : NULL;
    if (rv) rv->data[0] = -1.0f;
    e = (vt_err){0}; /* the first error message is kept: clear the one above */
    float *before = ok ? params_copy(G2) : NULL;
    T_CHECK(T, rv && vt_params_save(G, path, &e) == 0 &&
                   vt_adapt_load(G2, 2, g2.arch.in_chans, 0, 0, path, NULL, &e) != 0 &&
                   strstr(e.msg, "conv_stem.norm1.running_var") && strstr(e.msg, "running variance"),
            "a negative running variance refused while the head is adapted: %s", e.msg);
    float *after = ok ? params_copy(G2) : NULL;
    /* the tensors before the bad one in the store's order would have been loaded by a one-pass loader */
    T_CHECK(T, before && after && memcmp(before, after, sizeof(float) * (size_t)params_numel(G2)) == 0,
            "a refused file leaves the model as it was");
    free(before);
    free(after);
    /* a head that is re-initialised may hold anything finite or not (its values go unused); kept, it may not */
    vt_tensor *h10 = vt_params_find(P10, "head.weight");
    if (h10) h10->data[1] = NAN;
    vt_params *P10b = vt_params_new(&e);
    e = (vt_err){0};
    ok = h10 && P10b && vt_params_save(P10, path, &e) == 0 && vt_model_init_params(&c10, P10b, 3, &e) == 0;
    T_CHECK(T, ok && vt_adapt_load(P2, 2, c2.arch.in_chans, 0, 0, path, NULL, &e) == 0 && isfinite(h->data[1]),
            "a NaN in a re-initialised head is no reason to refuse: %s", e.msg);
    e = (vt_err){0};
    T_CHECK(T, ok && vt_adapt_load(P10b, 10, c10.arch.in_chans, 0, 0, path, NULL, &e) != 0 &&
                   strstr(e.msg, "head.weight") &&
                   strstr(e.msg, "NaN"),
            "a NaN in a head that is kept is refused: %s", e.msg);
    vt_params_free(P10b);
    vt_params_free(G);
    vt_params_free(G2);
    unlink(path);
    vt_params_free(P10);
    vt_params_free(P2);
    vt_params_free(Q);
}

/* The soft-target cross-entropy refuses mismatched shapes, naming the op (its values: gradcheck and the torch test). */
static void check_soft_ce_shapes(vt_test *T) {
    vt_err e = {0};
    vt_params *P = vt_params_new(&e);
    vt_graph *g = vt_graph_new(P, 1, &e);
    const int a[2] = {4, 5}, b[2] = {4, 6};
    vt_tensor *x = vt_input(g, "x", 2, a), *t = vt_input(g, "t", 2, b);
    T_CHECK(T, vt_soft_cross_entropy(g, x, t) == NULL && vt_graph_finalize(g, &e) != 0 &&
                   strstr(e.msg, "soft_cross_entropy") && strstr(e.msg, "(4, 6)"),
            "mismatched targets refused: %s", e.msg);
    vt_graph_free(g);
    vt_params_free(P);
}

/* Invariants of Mixup/CutMix and of the repeated-augmentation sampler (their values against timm/DeiT: the reference
 * test); here they also run under ASan. */
static void check_mixup_sampler(vt_test *T) {
    vt_err e = {0};
    enum { B = 4, C = 2, H = 5, W = 6, K = 3 };
    float x[B * C * H * W], t[B * K];
    const int lab[B] = {0, 1, 2, 1};
    for (int i = 0; i < B * C * H * W; i++) x[i] = (float)i;
    vt_mixup m = vt_mixup_timm(K);
    vt_mixup_draw d = {0.5, 0, 0, 0};
    double lam;
    T_CHECK(T, vt_mixup_apply(&m, &d, x, B, C, H, W, lab, t, &lam, &e) == 0, "%s", e.msg);
    double err = 0;
    for (int i = 0; i < C * H * W; i++) err = t_worse(err, fabs(x[i] - x[(B - 1) * C * H * W + i]));
    T_CHECK(T, err == 0 && lam == 0.5, "lam 0.5 makes each pair equal: %g", err);
    d = (vt_mixup_draw){0.3, 1, 2, 3};
    T_CHECK(T, vt_mixup_apply(&m, &d, x, B, C, H, W, lab, t, &lam, &e) == 0 && lam > 0 && lam < 1, "cutmix lam %g",
            lam);
    double s = 0;
    for (int k = 0; k < K; k++) s += t[k];
    T_CHECK(T, fabs(s - 1) < 1e-6, "targets sum to 1: %g", s);
    /* timm's Mixup corrects lam by default (correct_lam=True): a box clipped at the corner. timm's rand_bbox at lam 0.3
     * cuts int(5·sqrt(0.7)) = 4 rows and int(6·sqrt(0.7)) = 5 columns centred on (0, 0): rows [0, 2) and columns
     * [0, 2) remain, so lam = 1 - 4/30 */
    d = (vt_mixup_draw){0.3, 1, 0, 0};
    T_CHECK(T, vt_mixup_apply(&m, &d, x, B, C, H, W, lab, t, &lam, &e) == 0 && fabs(lam - (1.0 - 4.0 / 30.0)) < 1e-12,
            "CutMix lam corrected to the clipped box by default: %g", lam);
    T_CHECK(T, vt_mixup_apply(&m, &d, x, 3, C, H, W, lab, t, &lam, &e) != 0 && strstr(e.msg, "even"), "odd batch");
    const int bad[B] = {0, 1, 5, 1};
    e = (vt_err){0}; /* the first error message is kept: start afresh */
    T_CHECK(T, vt_mixup_apply(&m, &d, x, B, C, H, W, bad, t, &lam, &e) != 0 && strstr(e.msg, "label 5"), "bad label: %s", e.msg);
    const int edge[B] = {0, 1, K, 1}; /* the first label past the classes */
    e = (vt_err){0};
    T_CHECK(T, vt_mixup_apply(&m, &d, x, B, C, H, W, edge, t, &lam, &e) != 0 && strstr(e.msg, "label 3"),
            "label K refused: %s", e.msg);
    /* keyed draws (the trainer's): each rank its own (as DeiT seeds each rank with seed + rank), each micro-batch its
     * own, and the same key the same draw (what makes a resumed run draw as an uninterrupted one) */
    int same_rank = 0, same_batch = 0, again = 1;
    for (int64_t b = 0; b < 200; b++) {
        vt_mixup_draw d0, d1, d2, d3;
        vt_rng r0, r1, r2, r3;
        vt_rng_seed(&r0, vt_mixup_key(7, b, 0));
        vt_rng_seed(&r1, vt_mixup_key(7, b, 1));
        vt_rng_seed(&r2, vt_mixup_key(7, b + 1, 0));
        vt_rng_seed(&r3, vt_mixup_key(7, b, 0));
        vt_mixup_sample(&m, H, W, &r0, &d0);
        vt_mixup_sample(&m, H, W, &r1, &d1);
        vt_mixup_sample(&m, H, W, &r2, &d2);
        vt_mixup_sample(&m, H, W, &r3, &d3);
        same_rank += d0.lam == d1.lam;
        same_batch += d0.lam == d2.lam;
        again &= d0.lam == d3.lam && d0.cutmix == d3.cutmix && d0.cy == d3.cy && d0.cx == d3.cx;
    }
    T_CHECK(T, same_rank == 0 && same_batch == 0 && again,
            "Mixup keys: ranks 0 and 1 drew the same lam %d times of 200, batches b and b+1 %d times; same key same draw "
            "%d", same_rank, same_batch, again);
    T_CHECK(T, vt_mixup_batch(&m, x, B, C, H, W, lab, t, vt_mixup_key(7, 0, 0), &lam, &e) == 0 && lam > 0 && lam <= 1,
            "vt_mixup_batch with a key: lam %g", lam);
    vt_rng r;
    vt_rng_seed(&r, 1);
    int idx[600];
    const int n = vt_ra_sample(idx, 600, 3, 1, 0, &r, &e);
    int ok = n == 512 && vt_ra_count(600, 1) == 512;
    for (int i = 0; ok && i + 2 < n; i += 3) ok = idx[i] == idx[i + 1] && idx[i] == idx[i + 2] && idx[i] < 600;
    T_CHECK(T, ok, "RASampler: 512 of 600, each index 3 times in a row (got %d)", n);
    T_CHECK(T, vt_ra_sample(idx, 600, 3, 2, 2, &r, &e) < 0, "rank outside replicas refused");
    /* vt_ra_repeat: over 2 ranks (the same draws), the 3 copies of each of 256 images are copies 0, 1 and 2 */
    int seen[256][3] = {{0}}, a[128], b[128];
    vt_rng r0 = r, r1 = r;
    ok = vt_ra_sample(a, 256, 3, 2, 0, &r0, &e) == 128 && vt_ra_sample(b, 256, 3, 2, 1, &r1, &e) == 128;
    for (int i = 0; ok && i < 128; i++) {
        seen[a[i]][vt_ra_repeat(i, 256, 3, 2, 0)]++;
        seen[b[i]][vt_ra_repeat(i, 256, 3, 2, 1)]++;
    }
    int copies = 0, clash = 0;
    for (int i = 0; i < 256; i++)
        for (int k = 0; k < 3; k++) copies += seen[i][k], clash += seen[i][k] > 1;
    T_CHECK(T, ok && copies == 256 && clash == 0, "RASampler copies numbered apart (copies %d, clashes %d)", copies,
            clash);
}

/* lam ~ Beta(a, a) of the smallest alphas --mixup takes: almost always 0 or 1 (no mixing), as numpy's beta draws it
 * (timm's Mixup); the gamma draws underflow there, which had made every lam 0.5 at a = 1e-300 and a quarter of them
 * at 1e-3 */
static void check_beta_small(vt_test *T) {
    static const double alphas[] = {1e-300, 1e-5, 1e-3, 0.8, 1.0};
    for (int i = 0; i < 5; i++) {
        vt_rng r;
        vt_rng_seed(&r, 3);
        int half = 0, ends = 0, low = 0, bad = 0;
        const int n = 20000;
        for (int k = 0; k < n; k++) {
            const double lam = vt_rng_beta(&r, alphas[i], alphas[i]);
            bad += !(lam >= 0.0 && lam <= 1.0);
            half += lam == 0.5;
            ends += lam < 0.01 || lam > 0.99;
            low += lam < 0.5;
        }
        const int small = alphas[i] < 0.01;
        T_CHECK(T, !bad && (small ? half == 0 && ends > 0.98 * n : ends < 0.1 * n) && abs(2 * low - n) < n / 20,
                "Beta(%g, %g): %d of %d draws 0.5, %d within 0.01 of 0 or 1, %d below 0.5, %d outside [0, 1]",
                alphas[i], alphas[i], half, n, ends, low, bad);
    }
    vt_rng r;
    vt_rng_seed(&r, 3);
    const double zero = vt_rng_beta(&r, 0.0, 1.0), neg = vt_rng_beta(&r, -1.0, -1.0), nan_a = vt_rng_beta(&r, NAN, 1.0);
    T_CHECK(T, isnan(zero) && isnan(neg) && isnan(nan_a), "Beta of shapes not > 0: %g %g %g, not NaN", zero, neg,
            nan_a);
}

void test_recipe(vt_test *T) {
    check_beta_small(T);
    check_mixup_sampler(T);
    check_recipe_transforms(T);
    check_soft_ce_shapes(T);
    check_ema(T);
    check_accum(T);
    check_recipes(T);
    check_bicubic(T);
    check_adapt(T);
}
