/* Named training recipes: each preset cites where its values come from. */
#include "vitc/recipe.h"

#include <cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "vitc/fileio.h"
#include "vitc/model.h"
#include "vitc/schedule.h"
#include "vitc/train.h"

/* vitc's plain defaults (vt_train_defaults): what `vitc train` does without --recipe (its crop + flip transform resizes
 * with bicubic, src/train/augment.c). */
static void preset_default(vt_recipe *r) {
    vt_train_opts o;
    vt_train_defaults(&o);
    *r = (vt_recipe){.source = "vitc's defaults (vt_train_defaults): Fashion-MNIST crop + flip, no mixing",
                     .lr = o.lr, .weight_decay = o.weight_decay, .warmup_lr = o.warmup_lr, .min_lr = o.min_lr,
                     .warmup_epochs = o.warmup_epochs, .smoothing = o.smoothing, .epochs = o.epochs,
                     .batch = o.batch, .accum_steps = 1, .drop_path = -1, .model_ema_decay = 0.99996,
                     .interpolation = "bicubic", .scale = {1, 1}, .ratio = {1, 1}, .hflip = 0.5};
    r->mixup = vt_mixup_timm(0);
    r->mixup.mixup_alpha = r->mixup.cutmix_alpha = 0.0;
}

/* DeiT (facebookresearch/deit main.py argument defaults, timm's create_transform and Mixup):
 * AdamW lr 5e-4 · batch/512, wd 0.05, 300 epochs, 5 warm-up epochs from 1e-6, cosine to 1e-5, label smoothing 0.1,
 * Mixup 0.8 / CutMix 1.0 / switch 0.5, RandAugment rand-m9-mstd0.5-inc1, RandomErasing 0.25 pixel, drop-path 0.1,
 * model EMA 0.99996 (main.py sets model_ema=True by default), repeated augmentation (RASampler) on, batch 64 a GPU,
 * color jitter 0.3 (main.py's default; unused: timm applies it only without aa), bicubic RandomResizedCrop (0.08-1,
 * 3/4-4/3). */
static void preset_deit(vt_recipe *r) {
    *r = (vt_recipe){.source = "DeiT main.py defaults (timm create_transform, Mixup)", .lr = 5e-4,
                     .lr_base_batch = 512, .weight_decay = 0.05, .warmup_lr = 1e-6, .min_lr = 1e-5,
                     .warmup_epochs = 5, .smoothing = 0.1, .epochs = 300, .batch = 64, .accum_steps = 1,
                     .drop_path = 0.1, .model_ema = 1, .model_ema_decay = 0.99996, .repeated_aug = 1,
                     .aa = "rand-m9-mstd0.5-inc1", .reprob = 0.25, .remode = "pixel", .recount = 1,
                     .interpolation = "bicubic", .scale = {0.08, 1.0}, .ratio = {3.0 / 4.0, 4.0 / 3.0}, .hflip = 0.5,
                     .color_jitter = 0.3, .sched_update = VT_SCHED_DEIT};
    r->mixup = vt_mixup_timm(0);
}

/* Swin (microsoft/Swin-Transformer config.py defaults + main.py; spec-flatten.md §2.1: FLatten's code keeps them):
 * AdamW base lr 5e-4, warm-up lr 5e-7 and min lr 5e-6, all three scaled by batch/512, 300 epochs, 20 warm-up
 * epochs, wd 0.05, clip-grad 5, batch 128 a GPU, color jitter 0.4 (unused), label smoothing 0.1, Mixup 0.8 / CutMix
 * 1.0 / switch 0.5,
 * RandAugment rand-m9-mstd0.5-inc1, RandomErasing 0.25 pixel, drop-path per model (Swin-T 0.2, S 0.3, B 0.5: the
 * named configs' rates), no EMA, no repeated augmentation. The cosine spans the warm-up too (no warmup_prefix: Swin's
 * code before its 2022-10 change, which FLatten and GroupMixFormer copy); their step_update after optimizer.step() runs
 * step s at lr(s - 1), vitc at lr(s). */
static void preset_swin(vt_recipe *r) {
    preset_deit(r);
    r->source = "Swin config.py defaults + main.py as FLatten and GroupMixFormer copied them (spec-flatten.md §2.1), "
                "before Swin's 2022-10 WARMUP_PREFIX default";
    r->warmup_lr = 5e-7;
    r->min_lr = 5e-6;
    r->scale_warmup_min_lr = 1;
    r->warmup_epochs = 20;
    r->clip_grad = 5.0;
    r->batch = 128;
    r->drop_path = -1;
    r->model_ema = 0;
    r->repeated_aug = 0;
    r->color_jitter = 0.4; /* _C.AUG.COLOR_JITTER (unused: RandAugment is on) */
    r->notes = NULL;
    r->sched_update = VT_SCHED_STEP; /* lr_scheduler.step_update every iteration */
}

/* FLatten (the repo's cfgs/ yaml files over Swin's config.py; main.py, and main_ema.py for CSwin as its README runs
 * it):
 * FLatten-Swin keeps Swin's recipe; FLatten-PVT/PVTv2 take 5 warm-up epochs from 1e-6 and min lr 1e-5 (both scaled by
 * batch/512 like the lr), 10 cooldown epochs, no clipping (T, S, v2-b0..b2), batch 128 (T, v2-b0..b2) or 64 (S);
 * FLatten-CSwin 20 warm-up epochs, the same lrs and cooldown, no clipping, batch 256 / 128 / 64 (T / S / B), weight
 * decay 0.1 for B, and a model EMA of 0.99984 (0.99982 for B). FLatten on DeiT has no config in the repo (its hosts
 * are hierarchical): DeiT's recipe, its host's. */
static void preset_flatten(vt_recipe *r, const char *model) {
    preset_swin(r);
    r->source = "FLatten: Swin's config.py + main.py (spec-flatten.md §2.1), with its cfgs/*.yaml for PVT and CSwin";
    const int flatten = model && strncmp(model, "flatten_", 8) == 0; /* the FLatten models (not their hosts) */
    if (flatten && strstr(model, "deit")) {
        preset_deit(r);
        r->source = "FLatten on DeiT: no config in the FLatten repo, so DeiT main.py's defaults (its host's recipe)";
        return;
    }
    if (flatten && strstr(model, "384"))
        r->notes = "the 384-pixel fine-tuning configs (flatten_*_384.yaml) are not presets: this is the 224 recipe";
    const int pvt = flatten && strstr(model, "pvt"), cswin = flatten && strstr(model, "cswin");
    if (!pvt && !cswin) return;
    r->warmup_epochs = pvt ? 5 : 20;
    r->warmup_lr = 1e-6;
    r->min_lr = 1e-5;
    r->cooldown_epochs = 10;
    r->clip_grad = 0.0;
    const int small = strstr(model, "small") != NULL, base = strstr(model, "base") != NULL;
    r->batch = pvt ? (small ? 64 : 128) : base ? 64 : small ? 128 : 256;
    if (cswin) {
        r->model_ema = 1;
        r->model_ema_decay = base ? 0.99982 : 0.99984;
        r->weight_decay = base ? 0.1 : 0.05;
        r->source = "FLatten-CSwin: cfgs/flatten_cswin_*.yaml + main_ema.py (its README's EMA decay)";
    } else {
        r->source = "FLatten-PVT: cfgs/flatten_pvt*.yaml over Swin's config.py + main.py";
    }
}

/* GroupMixFormer (spec-groupmixformer.md §7, the repo's recipe): AdamW 5e-4 · batch/512, batch 64 a GPU (its README's
 * and launch_scripts/run_train.sh's --batch-size 64 on 8 GPUs), 20 warm-up epochs, cosine, wd 0.05, clip-grad 5,
 * label smoothing 0.1, Mixup 0.8 / CutMix 1.0, RandAugment rand-m9-mstd0.5-inc1, RandomErasing 0.25, 300 epochs, no
 * EMA; drop-path: the model's (the named configs carry the yaml files' rates); every BatchNorm
 * a SyncBatchNorm. The Swin code base: warm-up/min lr as Swin's. */
static void preset_gmf(vt_recipe *r) {
    preset_swin(r);
    r->source = "GroupMixFormer repo recipe (spec-groupmixformer.md §7; batch: its run_train.sh's; drop-path: the "
                "model's, its yaml file's)";
    r->batch = 64;
    r->sync_bn = 1;
}

/* Refiner (spec-refiner.md §7; scripts/refiner_*.yaml run by its main.py, timm's train.py): lr 5e-4 as given (no
 * batch scaling), 5 warm-up epochs from 1e-6, cosine to 1e-5 stepped per epoch, 10 cooldown epochs, batch 32 a GPU,
 * random train interpolation, no repeated augmentation, model EMA 0.99996 kept and evaluated, drop-path the model's
 * and cos_reg (the named configs carry the yaml files' settings); the rest DeiT's. MixToken and token labelling are
 * not done. */
static void preset_refiner(vt_recipe *r) {
    preset_deit(r);
    r->source = "Refiner scripts/*.yaml + its main.py (timm train.py; spec-refiner.md §7)";
    r->lr_base_batch = 0;
    r->batch = 32;
    r->cooldown_epochs = 10;
    r->repeated_aug = 0;
    snprintf(r->interpolation, sizeof r->interpolation, "random");
    r->sched_update = VT_SCHED_EPOCH;
    r->drop_path = -1; /* (DeiT's 0.1 otherwise) */
    r->color_jitter = 0.4; /* the yaml files' (unused: RandAugment is on) */
    r->notes = "MixToken and token labelling are not implemented (the cos_reg loss term is the model's: --cos-reg); "
               "RandomErasing runs on each image before Mixup/CutMix (DeiT's order), where Refiner's prefetcher erases "
               "the mixed batch";
}

/* MSF (spec-msf.md §4.4, the README command of the torchvision reference scripts): AdamW lr 1e-3 (4 GPUs × 256, not
 * scaled), wd 0.05, 100 epochs, 10 warm-up epochs starting at 0.033·lr, cosine to 0, label smoothing 0.1,
 * Mixup 0.2 / CutMix 0.2 (torchvision's RandomChoice: switch 0.5; each image mixed with the one before it, roll),
 * RA sampler, gradient norm clipped at 1 (its train.py's --clip-grad-norm default), no EMA, drop-path the model's
 * (SimpleViT none; the Swin hosts torchvision's swin_t / swin_s builders' stochastic depth 0.2 / 0.3), weight decay on
 * every parameter (norm_weight_decay None), the Swin hosts' too. */
static void preset_msf(vt_recipe *r) {
    preset_deit(r);
    r->source = "MSF README command (spec-msf.md §4.4; torchvision reference train.py)";
    r->lr = 1e-3;
    r->lr_base_batch = 0;
    r->warmup_lr = 0.033e-3;
    r->warmup_lr_rel = 0.033; /* --lr-warmup-decay: LinearLR's start_factor, a share of whatever the lr is */
    r->min_lr = 0.0;
    r->warmup_epochs = 10;
    r->epochs = 100;
    r->batch = 256;
    r->clip_grad = 1.0;
    r->drop_path = -1;
    r->model_ema = 0;
    r->mixup.mixup_alpha = 0.2;
    r->mixup.cutmix_alpha = 0.2;
    r->mixup.roll = 1; /* RandomMixup / RandomCutmix pair each image with batch.roll(1, 0)'s */
    r->reprob = 0.0;
    snprintf(r->aa, sizeof r->aa, "three");
    r->repeated_aug = 1; /* torchvision's RASampler: DeiT's, 3 repeats */
    snprintf(r->interpolation, sizeof r->interpolation, "bilinear"); /* train.py's --interpolation default */
    r->sched_update = VT_SCHED_EPOCH; /* lr_scheduler.step() after each epoch */
    r->warmup_prefix = 1;             /* SequentialLR: LinearLR for the warm-up, then CosineAnnealingLR over the rest */
    r->decay_all = 1; /* utils.set_weight_decay without --norm-weight-decay: norms, biases, Swin's tables decayed too */
    r->notes = "`--auto-augment three` keeps a 1-channel image's channel (torchvision's Grayscale(3) makes three)";
}

/* PVT and PVTv2 (whai362/PVT classification/main.py, DeiT's script with its own defaults, and its configs folder):
 * DeiT's settings but batch 128 a GPU, no model EMA (its arguments commented out), color jitter 0.4 (unused), no clipping
 * and the config files' drop-path (the named models'), epochs as DeiT's loop (no cooldown). */
static void preset_pvt(vt_recipe *r) {
    preset_deit(r);
    r->source = "PVT classification/main.py defaults + configs/pvt*/ (whai362/PVT)";
    r->batch = 128;
    r->model_ema = 0;
    r->drop_path = -1;
    r->color_jitter = 0.4;
}

/* Next-ViT (bytedance/Next-ViT classification/main.py and its README's training command): DeiT's script as PVT's
 * copy of it (no model EMA, color jitter 0.4, each model's drop-path: hard-coded in nextvit.py, main.py's --drop-path
 * does not reach it) with batch 256 a GPU, 20 warm-up epochs, weight decay 0.1, clip-grad 5 and no repeated
 * augmentation. */
static void preset_nextvit(vt_recipe *r) {
    preset_pvt(r);
    r->source = "Next-ViT classification/main.py + its README's command (--batch-size 256 --warmup-epochs 20 "
                "--weight-decay 0.1)";
    r->batch = 256;
    r->warmup_epochs = 20;
    r->weight_decay = 0.1;
    r->clip_grad = 5.0;
    r->repeated_aug = 0;
}

/* hMHSA + cFFN (spec-hmhsa-cffn.md §3: no official code; the paper trains each host with its own recipe): its host's,
 * PVT's for PVT and PVTv2, Next-ViT's for Next-ViT, DeiT's otherwise. */
static void preset_hmhsa(vt_recipe *r, const vt_model_cfg *named) {
    const char *family = named ? named->family->name : "";
    if (!strcmp(family, "nextvit")) {
        preset_nextvit(r);
        r->source = "hMHSA/cFFN in Next-ViT: its host's recipe (spec-hmhsa-cffn.md §3), Next-ViT's main.py + README";
    } else if (!strcmp(family, "pvt")) {
        preset_pvt(r);
        r->source = "hMHSA/cFFN in PVT: its host's recipe (spec-hmhsa-cffn.md §3), PVT's main.py + configs";
    } else {
        preset_deit(r);
        r->source = "hMHSA/cFFN: DeiT's settings, the recipe of the paper's DeiT hosts (spec-hmhsa-cffn.md §3: each "
                    "host trains with its own: PVT's and Next-ViT's for those; on another host give that host's, e.g. "
                    "--recipe swin on Swin-T)";
    }
}

static const char *const names[] = {"default", "deit",  "swin",    "flatten", "groupmixformer",
                                    "refiner", "msf",   "hmhsa",   "pvt",     "nextvit"};

int vt_recipe_count(void) { return (int)(sizeof names / sizeof names[0]); }

const char *vt_recipe_name(int i) { return i >= 0 && i < vt_recipe_count() ? names[i] : NULL; }

int vt_recipe_get(const char *name, const char *model, vt_recipe *r, vt_err *e) {
    const vt_model_cfg *named = model ? vt_model_find(model) : NULL;
    if (named) model = named->name; /* an alias (refined_vit_m, FLatten_CSWin_...) takes its model's presets */
    if (!strcmp(name, "default")) preset_default(r);
    else if (!strcmp(name, "deit")) preset_deit(r);
    else if (!strcmp(name, "swin")) preset_swin(r);
    else if (!strcmp(name, "flatten")) preset_flatten(r, model);
    else if (!strcmp(name, "groupmixformer")) preset_gmf(r);
    else if (!strcmp(name, "refiner")) preset_refiner(r);
    else if (!strcmp(name, "msf")) preset_msf(r);
    else if (!strcmp(name, "hmhsa")) preset_hmhsa(r, named);
    else if (!strcmp(name, "pvt")) preset_pvt(r);
    else if (!strcmp(name, "nextvit")) preset_nextvit(r);
    else {
        char list[256] = "";
        for (int i = 0; i < vt_recipe_count(); i++)
            snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "", names[i]);
        return vt_seterr_code(e, VT_E_USAGE, "unknown recipe '%s' (known: %s)", name, list);
    }
    snprintf(r->name, sizeof r->name, "%s", name);
    return 0;
}

double vt_recipe_lr(const vt_recipe *r) {
    if (r->lr_given || r->lr_base_batch <= 0) return r->lr;
    return r->lr * r->batch * (r->accum_steps > 0 ? r->accum_steps : 1) * (r->world_size > 1 ? r->world_size : 1) /
           r->lr_base_batch;
}

void vt_recipe_apply(const vt_recipe *r, vt_train_opts *o) {
    const double f = vt_recipe_lr(r) / r->lr;
    o->lr = vt_recipe_lr(r);
    o->warmup_lr = r->scale_warmup_min_lr && !r->warmup_lr_given ? r->warmup_lr * f : r->warmup_lr;
    if (r->warmup_lr_rel > 0 && !r->warmup_lr_given) o->warmup_lr = r->warmup_lr_rel * o->lr;
    o->min_lr = r->scale_warmup_min_lr && !r->min_lr_given ? r->min_lr * f : r->min_lr;
    o->weight_decay = r->weight_decay;
    o->warmup_epochs = r->warmup_epochs;
    o->clip_grad = r->clip_grad;
    o->smoothing = r->smoothing;
    o->epochs = r->epochs;
    o->cooldown_epochs = r->cooldown_epochs;
    o->sched_update = r->sched_update;
    o->warmup_prefix = r->warmup_prefix;
    o->batch = r->batch;
    o->accum_steps = r->accum_steps;
    o->mixup = r->mixup;
    o->model_ema = r->model_ema;
    o->model_ema_decay = r->model_ema_decay;
    o->repeated_aug = r->repeated_aug ? 3 : 0;
    o->sync_bn = r->sync_bn;
    o->recipe = r;
}

int vt_recipe_transforms(const vt_recipe *r, int size, vt_tf_params *p, vt_err *e) {
    *p = vt_tf_deit(size);
    for (int i = 0; i < 2; i++) p->scale[i] = (float)r->scale[i], p->ratio[i] = (float)r->ratio[i];
    p->hflip = (float)r->hflip;
    if (!strcmp(r->interpolation, "bicubic")) p->interp = VT_INTERP_BICUBIC;
    else if (!strcmp(r->interpolation, "bilinear")) p->interp = VT_INTERP_BILINEAR;
    else if (!strcmp(r->interpolation, "random")) p->interp = VT_INTERP_RANDOM;
    else return vt_seterr(e, "recipe %s: unknown train interpolation '%s'", r->name, r->interpolation);
    p->ra_interp = p->interp; /* timm hands RandAugment the train interpolation (random: its own random choice) */
    p->re_prob = (float)r->reprob;
    p->re_count = r->recount > 0 ? r->recount : 1;
    if (r->reprob > 0 && strcmp(r->remode, "pixel") != 0)
        return vt_seterr(e, "recipe %s: RandomErasing mode '%s' is not implemented (pixel is)", r->name, r->remode);
    p->ra_layers = 0;
    p->three = !strcmp(r->aa, "three"); /* the MSF's --auto-augment three */
    if (!r->aa[0] || p->three) return vt_tf_params_check(p, e);
    char aa[64];
    snprintf(aa, sizeof aa, "%s", r->aa);
    int inc = 0, first = 1;
    p->ra_layers = 2; /* timm's defaults: n 2, m 10 → given, mstd 0, p 0.5 */
    p->ra_magnitude = 10.0f;
    p->ra_mstd = 0.0f;
    p->ra_prob = 0.5f;
    for (char *save = NULL, *tok = strtok_r(aa, "-", &save); tok; tok = strtok_r(NULL, "-", &save), first = 0) {
        char *end = NULL;
        if (first) {
            if (strcmp(tok, "rand")) break;
            continue;
        }
        const int mstd = !strncmp(tok, "mstd", 4), incl = !strncmp(tok, "inc", 3);
        const char *num = tok + (mstd ? 4 : incl ? 3 : 1);
        const double v = strtod(num, &end);
        if (end == num || *end) return vt_seterr(e, "recipe %s: bad RandAugment section '%s' in '%s'", r->name, tok, r->aa);
        if (mstd) p->ra_mstd = (float)v;
        else if (incl) inc = v != 0;
        else if (tok[0] == 'm') p->ra_magnitude = (float)v;
        else if (tok[0] == 'n') p->ra_layers = (int)v;
        else if (tok[0] == 'p') p->ra_prob = (float)v;
        else return vt_seterr(e, "recipe %s: unknown RandAugment section '%s' in '%s'", r->name, tok, r->aa);
    }
    if (strncmp(r->aa, "rand", 4) != 0 || !inc)
        return vt_seterr(e, "recipe %s: augmentation '%s' is not implemented (RandAugment with increasing ops, "
                         "rand-...-inc1, and three are)", r->name, r->aa);
    return vt_tf_params_check(p, e);
}

/* The settings as a cJSON object (NULL when out of memory). */
static cJSON *to_json(const vt_recipe *r) {
    cJSON *j = cJSON_CreateObject();
    if (!j) return NULL;
    vt_train_opts o;
    vt_train_defaults(&o);
    vt_recipe_apply(r, &o);
    cJSON_AddStringToObject(j, "recipe", r->name);
    cJSON_AddStringToObject(j, "source", r->source ? r->source : "");
    if (r->notes) cJSON_AddStringToObject(j, "not_implemented", r->notes);
    cJSON_AddStringToObject(j, "opt", "adamw");
    cJSON_AddStringToObject(j, "sched", "cosine");
    static const char *const updates[] = {"step", "epoch", "epoch (DeiT main.py: step(epoch) after it)"};
    cJSON_AddStringToObject(j, "lr_update", updates[r->sched_update >= 0 && r->sched_update <= 2 ? r->sched_update : 0]);
    cJSON_AddBoolToObject(j, "warmup_prefix", r->warmup_prefix);
    cJSON_AddNumberToObject(j, "cooldown_epochs", r->cooldown_epochs);
    cJSON_AddNumberToObject(j, "lr_base", r->lr);
    if (r->lr_given) cJSON_AddNullToObject(j, "lr_base_batch"); /* --lr: used as given */
    else cJSON_AddNumberToObject(j, "lr_base_batch", r->lr_base_batch);
    cJSON_AddNumberToObject(j, "lr", o.lr);
    cJSON_AddNumberToObject(j, "warmup_lr", o.warmup_lr);
    cJSON_AddNumberToObject(j, "min_lr", o.min_lr);
    cJSON_AddNumberToObject(j, "warmup_epochs", r->warmup_epochs);
    cJSON_AddNumberToObject(j, "epochs", r->epochs);
    cJSON_AddNumberToObject(j, "batch_size", r->batch);
    cJSON_AddNumberToObject(j, "accum_steps", r->accum_steps);
    cJSON_AddNumberToObject(j, "world_size", r->world_size > 1 ? r->world_size : 1);
    cJSON_AddNumberToObject(j, "weight_decay", r->weight_decay);
    if (r->clip_grad > 0) cJSON_AddNumberToObject(j, "clip_grad", r->clip_grad);
    else cJSON_AddNullToObject(j, "clip_grad");
    cJSON_AddNumberToObject(j, "smoothing", r->smoothing);
    if (r->drop_path >= 0) cJSON_AddNumberToObject(j, "drop_path", r->drop_path);
    else cJSON_AddStringToObject(j, "drop_path", "model");
    cJSON_AddNumberToObject(j, "mixup", r->mixup.mixup_alpha);
    cJSON_AddNumberToObject(j, "cutmix", r->mixup.cutmix_alpha);
    cJSON_AddNumberToObject(j, "mixup_prob", r->mixup.prob);
    cJSON_AddNumberToObject(j, "mixup_switch_prob", r->mixup.switch_prob);
    cJSON_AddStringToObject(j, "mixup_mode", "batch");
    cJSON_AddStringToObject(j, "mixup_pairs", r->mixup.roll ? "roll" : "flip"); /* torchvision's b-1, timm's B-1-b */
    cJSON_AddBoolToObject(j, "model_ema", r->model_ema);
    cJSON_AddNumberToObject(j, "model_ema_decay", r->model_ema_decay);
    cJSON_AddBoolToObject(j, "repeated_aug", r->repeated_aug);
    cJSON_AddBoolToObject(j, "sync_bn", r->sync_bn);
    /* model: 1-D parameters and the family's list */
    cJSON_AddStringToObject(j, "no_weight_decay", r->decay_all ? "none" : "model");
    cJSON_AddStringToObject(j, "aa", r->aa);
    cJSON_AddNumberToObject(j, "reprob", r->reprob);
    cJSON_AddStringToObject(j, "remode", r->remode);
    cJSON_AddNumberToObject(j, "recount", r->recount);
    cJSON_AddStringToObject(j, "train_interpolation", r->interpolation);
    double sr[4] = {r->scale[0], r->scale[1], r->ratio[0], r->ratio[1]};
    cJSON_AddItemToObject(j, "scale", cJSON_CreateDoubleArray(sr, 2));
    cJSON_AddItemToObject(j, "ratio", cJSON_CreateDoubleArray(sr + 2, 2));
    cJSON_AddNumberToObject(j, "hflip", r->hflip);
    cJSON_AddNumberToObject(j, "color_jitter", r->color_jitter);
    return j;
}

int vt_recipe_decay(const vt_recipe *r, vt_params *P) {
    for (int i = 0; r->decay_all && i < P->n; i++) P->t[i]->no_decay = 0;
    return 0;
}

void vt_recipe_print(const vt_recipe *r, FILE *f) {
    cJSON *j = to_json(r);
    if (!j) return;
    fprintf(f, "Recipe %s (%s):\n", r->name, r->source ? r->source : "");
    for (cJSON *it = j->child; it; it = it->next) {
        if (!strcmp(it->string, "recipe") || !strcmp(it->string, "source")) continue;
        char *v = cJSON_IsString(it) ? NULL : cJSON_PrintUnformatted(it);
        fprintf(f, "  %-20s %s\n", it->string, v ? v : it->valuestring);
        cJSON_free(v);
    }
    cJSON_Delete(j);
}

int vt_recipe_save(const vt_recipe *r, const char *path, vt_err *e) {
    cJSON *j = to_json(r);
    char *text = j ? cJSON_Print(j) : NULL;
    cJSON_Delete(j);
    if (!text) return vt_seterr_code(e, VT_E_NOMEM, "out of memory writing %s", path);
    size_t n = strlen(text);
    char *t2 = malloc(n + 2);
    if (!t2) {
        cJSON_free(text);
        return vt_seterr_code(e, VT_E_NOMEM, "out of memory writing %s", path);
    }
    memcpy(t2, text, n);
    t2[n] = '\n';
    t2[n + 1] = '\0';
    cJSON_free(text);
    int rc = vt_write_text(path, t2, e);
    free(t2);
    return rc;
}
