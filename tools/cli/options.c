/* The options of the vitc commands: their table (optdefs) and help, the command line's parser, and the model options
 * that weight files and checkpoints record (take_model_options, weights_options, given_options). */
#include <ctype.h>
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vitc/model.h"
#include "vitc/safetensors.h"
#include "vitc/train.h"
#include "vitc/weights.h"

#include "cli.h"

/* O: a string or flag option; NUM: a number in [lo, hi]; POS: a number in (0, hi]; BELOW: a number in [lo, hi).
 * Unset numbers keep their defaults, so a given value outside the range is an error rather than a silent fall-back
 * to the default. */
#define O(n, k, f, h) {n, k, offsetof(opts, f), h, 0, 0, 0, 0}
#define NUM(n, k, f, lo, hi, h) {n, k, offsetof(opts, f), h, lo, hi, 0, 0}
#define POS(n, k, f, hi, h) {n, k, offsetof(opts, f), h, 0, hi, 1, 0}
#define BELOW(n, k, f, lo, hi, h) {n, k, offsetof(opts, f), h, lo, hi, 0, 1}
const optdef optdefs[] = {
    O("--weights", O_STR, weights, "W.safetensors: model weights (official state_dict names)"),
    O("-w", O_STR, weights, "same as --weights"),
    O("--input", O_STR, input, "X.safetensors holding `input` (B, C, H, W) [and `labels` (B,) for grad]"),
    O("--output", O_STR, output, "output safetensors file"),
    O("-o", O_STR, output, "same as --output"),
    NUM("--img-size", O_SIZE, img_size, 1, 4096, "input image size N, or HxW (height x width) where the model takes "
        "non-square inputs (images are then resized to HxW/crop_pct and centre-cropped, as timm's eval transform of a "
        "tuple size; training crops HxW; default: the model's)"),
    NUM("--in-chans", O_INT, in_chans, 1, 64, "input channels (default: the model's)"),
    NUM("--num-classes", O_INT, num_classes, 1, 100000, "classes of the head (default: the model's)"),
    O("--attn", O_STR, attn, "attention of every stage, or one per stage comma-separated: mhsa, msf, msf_g<N>, orig, "
      "orig_g<N>, hmhsa, flatten, refiner, gma (where the host allows it)"),
    O("--ffn", O_STR, ffn, "FFN of every block: mlp, cffn"),
    O("--dtype", O_STR, dtype, "arithmetic of the linear layers: fp32 (default); bf16 (products of >= 2^20 "
      "multiply-adds outside the attention kernels take bf16 inputs and sum in fp32, forward and backward; needs "
      "AVX512_BF16 or AMX); int8 at inference only (dynamic quantisation: per-run input scale, per-channel weight "
      "scales; when no linear layer can run int8, a warning and fp32); eval with bf16 or int8 also runs fp32 and "
      "reports the agreement"),
    O("--no-prepack", O_FLAG, no_prepack, "inference keeps no copies of the weights prepared for its kernels (the "
      "packed layouts of oneDNN's 1x1 convolutions on AMD and AVX2 CPUs, bf16 copies with --dtype bf16): less "
      "memory, e.g. half the resident set of DeiT-B at batch 1, and slower, 5-10% at batch 1 (as ONNX Runtime's "
      "session.disable_prepacking)"),
    O("--dims", O_STR, dims, "stage widths, one value for every stage or one per stage, comma-separated (e.g. "
      "32,64,128,256; default: the model's)"),
    O("--depths", O_STR, depths, "blocks per stage, one value for every stage or one per stage, comma-separated "
      "(default: the model's)"),
    O("--heads", O_STR, heads, "attention heads per stage, one value for every stage or one per stage (default: the "
      "model's)"),
    O("--blocks", O_STR, blocks, "attention blocks to draw, comma-separated indices from 0 (default: all)"),
    O("--rollout", O_FLAG, rollout, "also draw attention rollout over all blocks (Abnar & Zuidema 2020)"),
    O("--save-maps", O_STR, save_maps, "MAPS.safetensors: the preprocessed inputs, the raw maps (images, heads, "
      "queries, keys) by block name, and `rollout`"),
    O("--windows", O_STR, windows, "attention window (Swin) or stripe width (CSwin) per stage, one value for every "
      "stage or one per stage, comma-separated (default: the model's)"),
    O("--json", O_FLAG, json, "machine-readable output"),
    O("--csv", O_FLAG, csv, "CSV with timm's column names (a header line, then one row per model)"),
    NUM("--seed", O_LL, seed, 0, 9.2e18, "random seed (default 0)"),
    NUM("--batch-size", O_INT, batch, 1, 65536, "batch size (train under mpirun: per rank)"),
    O("--train", O_FLAG, train, "benchmark a training step (forward, backward, AdamW) instead of inference"),
    NUM("--iters", O_INT, iters, 1, 1e6, "timed iterations (default 10)"),
    NUM("--threads", O_INT, threads, 1, 1024, "threads for OpenMP and OpenBLAS (default: the cores this process "
      "may run on, its CPU affinity; under mpirun, per rank: the node's cores divided among its ranks, at most its "
      "own, and the cores of ranks whose affinities overlap divided among them)"),
    NUM("--steps", O_INT, steps, 1, 1e6, "forward/backward passes on the batch (default 1); with N >= 2 an AdamW step "
      "(--lr, --weight-decay) follows each pass but the last, N-1 in all; G holds the last pass's loss and gradients, "
      "and every pass's loss as `losses`"),
    POS("--lr", O_DBL, lr, 10, "(peak) learning rate (default 1e-3, or the recipe's)"),
    NUM("--weight-decay", O_DBL, wd, 0, 1e3, "AdamW weight decay (default 0.05, or the recipe's; not on norms, biases, "
      "tokens, position embeddings)"),
    O("--data", O_STR, data, "dataset: fashion-mnist, or an image folder DIR holding train/<class>/<image> and "
      "val/<class>/<image> (torchvision ImageFolder: classes sorted by folder name); default fashion-mnist"),
    NUM("--workers", O_INT, workers, 1, 1024, "input pipeline threads decoding and augmenting images (default: the "
      "cores, at most 8; bench: with --data only)"),
    NUM("--epochs", O_INT, epochs, 1, VT_EPOCHS_MAX, "training epochs: the cosine's (default 10, or the recipe's), "
        "then --cooldown-epochs"),
    NUM("--cooldown-epochs", O_INT, cooldown_epochs, 0, VT_EPOCHS_MAX, "epochs trained at the final lr after --epochs "
        "(timm's; default 0, or the recipe's: 10 for refiner and the FLatten-PVT/CSwin models)"),
    O("--out", O_STR, out_dir, "run folder (checkpoints, metrics.csv, curves.png; default with --resume: that folder)"),
    O("--resume", O_STR, resume, "run folder whose checkpoint to continue from; the options not given take the values "
      "it records (data, recipe, batch size, schedule, augmentation, seed, ...)"),
    O("--overwrite", O_FLAG, overwrite, "start a fresh run in a folder that holds another run (its history is replaced)"),
    NUM("--warmup-epochs", O_DBL, warmup_epochs, 0, 1e6, "linear warm-up length in epochs, ending within the run "
      "(default 1, or the recipe's)"),
    NUM("--min-lr", O_DBL, min_lr, 0, 10, "final learning rate of the cosine, at most the peak; used as given (default "
        "1e-5, or the recipe's, which swin, flatten and groupmixformer scale with the batch as the lr)"),
    NUM("--warmup-lr", O_DBL, warmup_lr, 0, 10, "learning rate the linear warm-up starts from; used as given (default "
        "1e-6, or the recipe's, scaled as --min-lr's)"),
    BELOW("--smoothing", O_DBL, smoothing, 0, 1, "label smoothing in [0, 1) (default 0.1)"),
    NUM("--clip-grad", O_DBL, clip, 0, 1e30, "clip the global gradient norm (default: off, or the recipe's; 0: off)"),
    O("--recipe", O_STR, recipe, "named training recipe whose settings are the defaults (explicit options override "
      "them): default, deit, swin, flatten, groupmixformer, refiner, msf, hmhsa, pvt, nextvit; "
      "`vitc train [MODEL] --recipe list` prints them all (with MODEL: its per-model rates) and takes no other option"),
    NUM("--mixup", O_DBL, mixup, 0, 100, "Mixup alpha: lam ~ Beta(a, a) (default 0: off; deit 0.8)"),
    NUM("--cutmix", O_DBL, cutmix, 0, 100, "CutMix alpha (default 0: off; deit 1.0)"),
    NUM("--mixup-prob", O_DBL, mixup_prob, 0, 1, "probability that a batch is mixed (default 1; refused when --mixup "
        "and --cutmix are 0)"),
    NUM("--mixup-switch-prob", O_DBL, mixup_switch, 0, 1, "probability of CutMix when both are on (default 0.5; refused "
        "unless both are)"),
    O("--model-ema", O_FLAG, model_ema, "keep an EMA of the weights (timm ModelEmaV2), evaluated each epoch and "
      "saved as weights_ema.safetensors"),
    O("--no-model-ema", O_FLAG, no_model_ema, "no weight EMA (the deit and refiner recipes keep one)"),
    NUM("--model-ema-decay", O_DBL, ema_decay, 0, 1, "EMA decay (default 0.99996; refused without an EMA)"),
    O("--repeated-aug", O_FLAG, repeated_aug, "DeiT's repeated-augmentation sampler: each image 3 times in a row, "
      "⌊n/256⌋·256 images an epoch (on in the deit recipe)"),
    O("--no-repeated-aug", O_FLAG, no_repeated_aug, "a plain shuffle each epoch"),
    O("--sync-bn", O_FLAG, sync_bn, "under mpirun, BatchNorms normalise over every rank's batch (torch's "
      "SyncBatchNorm; on in the groupmixformer recipe, as its official training)"),
    O("--no-sync-bn", O_FLAG, no_sync_bn, "each rank's BatchNorms normalise over its own batch (DDP's plain BatchNorm)"),
    NUM("--accum-steps", O_INT, accum_steps, 1, 1e6, "micro-batches of --batch-size per optimiser step (default 1)"),
    O("--init-from", O_STR, init_from, "W.safetensors to fine-tune from: the head is re-initialised when "
      "--num-classes differs, position embeddings / relative-position tables are resized bicubically and an RGB "
      "input convolution is adapted to --in-chans (as timm)"),
    NUM("--drop-path", O_DBL, drop_path, 0, 0.99, "stochastic depth: the last block drops its residual branches with this "
      "probability, earlier ones linearly less (timm; default: the named config's rate, e.g. 0.2 for Swin-T, 0 for "
      "most; 0 turns it off; bench: with --train or --data only)"),
    NUM("--cos-reg", O_INT, cos_reg, 0, VT_COS_REG_MAX, "Refined-ViT: the official cos_reg loss term, 0.1/N times the mean cosine "
      "over heads of N consecutive pairs of block attention maps (default: the named config's, 2 for S and M as "
      "their yaml files, 0 for L; 0 turns it off)"),
    O("--augment", O_FLAG, augment, "augment the training images (on by default): random crop and flip, or on an image "
      "folder a recipe's DeiT transforms; turns it back on when resuming a --no-augment run"),
    O("--no-augment", O_FLAG, no_augment, "train on the eval transform's images: no random crop and flip (nor a "
      "recipe's DeiT transforms)"),
    NUM("--bucket-mib", O_DBL, bucket_mib, 0.01, 1024, "under mpirun: gradients are averaged in buckets of this many "
      "MiB (default 4; in one process: a notice, no effect)"),
    O("--no-overlap", O_FLAG, no_overlap, "under mpirun: average the gradients after backward instead of starting each "
      "bucket's allreduce during it (in one process: a notice, no effect)"),
    NUM("--train-subset", O_INT, train_subset, 0, 1e9, "use only N training images: fashion-mnist's first N, an image "
      "folder's N spread evenly over its classes (0: every image, the default; a resume takes the run's)"),
    NUM("--test-subset", O_INT, test_subset, 0, 1e9, "use only N test images, taken as --train-subset's (0: every "
      "image, the default; a resume takes the run's)"),
    NUM("--log-every", O_INT, log_every, 1, 1e9, "progress line every N batches (micro-batches with --accum-steps; default 50)"),
    NUM("--fault-nan-step", O_LL, fault_nan_step, 0, 9.2e18, "testing aid: poison the input of step N (0-based) with NaN "
      "(under mpirun: on the last rank only)"),
    NUM("--fault-batch-step", O_LL, fault_batch_step, 0, 9.2e18, "testing aid: the batch of step N (0-based) fails as "
      "a loader error would (under mpirun: on the last rank only)"),
    NUM("--fault-grad-step", O_LL, fault_grad_step, 0, 9.2e18, "testing aid: make one gradient element of optimiser "
      "step N (0-based) 1e30, too large for AdamW (on every rank)"),
    NUM("--fault-stop-step", O_LL, fault_stop_step, 0, 9.2e18, "testing aid: ask the run to stop, as SIGINT does, "
      "during optimiser step N (0-based): it stops at its end (under mpirun: asked on the last rank only)"),
    NUM("--fault-nan-eval", O_LL, fault_nan_eval, 0, VT_EPOCHS_MAX, "testing aid: make the first validation logit "
      "(of the first image scored) of epoch N (0-based) NaN, the EMA's validation with --model-ema (under mpirun: on "
      "the last rank only)"),
    O("--profile", O_FLAG, profile,
      "print the time spent per op type (per kernel) with its kind (GEMM, GEMMs fused with other work: with "
      "the share of the step in their GEMM calls, other), the split by kind and the 12 slowest nodes with their scope and shapes (with --json: the table on stderr, "
      "time_by_kind in the JSON)"),
    O("--features", O_FLAG, features, "write the stage maps `features.0`, `features.1`, ... (B, C, H, W) instead of "
      "logits, one per stage of the model (4 for Swin-T, 2 for swin_fmnist_tiny; hierarchical backbones: Swin, PVT, "
      "CSwin, GroupMixFormer, Next-ViT)"),
    O("--apply-transform", O_FLAG, apply_transform, "Refined-ViT: the paper's refine-every-block mode (every block "
      "refines its own map; the official code's apply_transform)"),
    O("--double-heads", O_FLAG, double_heads, "hMHSA: double each hMHSA stage's heads and halve their width, as the "
      "paper does for odd-headed hosts (the named *_hmhsa_cffn models have it; stages of other attention types keep "
      "theirs)"),
    O("--train-form", O_FLAG, train_form, "use the training form of re-parameterised blocks (cFFN: r conv+BN branches; "
      "Next-ViT: pre-norm BatchNorms not merged; default: deployed form; train and grad always use the training form, "
      "see `vitc deploy`)"),
    O("--classes", O_STR, classes, "classes.json of a training run on an image folder ({\"0\": \"name\", ...}): "
      "predict prints these names; eval scores the folder's val/ class folders by them, no train/ needed (not with "
      "fashion-mnist)"),
    NUM("--topk", O_INT, topk, 1, 1e9, "classes listed per image (default 5, at most 64; more than the model's "
      "classes: all of them, with a notice)"),
    POS("--crop-pct", O_DBL, crop_pct, 10, "resize the shorter side to floor(S / crop_pct), then centre-crop S (default: the "
      "model's pretrained cfg, e.g. 0.875 for DeiT; > 1 pads)"),
    O("--help", O_FLAG, help, "show this help"),
    O("-h", O_FLAG, help, "show this help"),
};
const size_t noptdefs = sizeof optdefs / sizeof optdefs[0];
#undef O
#undef NUM
#undef POS
#undef BELOW

/* The help of an option in a command that reads it otherwise than its optdefs text says. */
static const struct {
    const char *cmd, *opt, *help;
} command_option_help[] = {
    {"attention", "--heads", "the heads to draw: all (default), mean (their mean) or indices such as 0,2"},
    {"attention", "--output", "the PNG to draw into"},
    {"forward", "--img-size", "input image size N, or HxW (default: the size of `input`, H x W, where the model's "
     "weights fit any size, else the model's)"},
    {"grad", "--img-size", "input image size N, or HxW (default: the size of `input`, H x W, where the model's weights "
     "fit any size, else the model's)"},
    {"grad", "--lr", "AdamW learning rate of --steps N >= 2, constant (default 1e-3; refused with --steps 1)"},
    {"grad", "--weight-decay", "AdamW weight decay of --steps N >= 2 (default 0; not on norms, biases, tokens, "
     "position embeddings; refused with --steps 1)"},
    {"bench", "--data", "also time the input pipeline of this dataset (fashion-mnist or an image folder DIR) alone, "
     "then a training step: --data implies --train"},
    {"bench", "--batch-size", "batch size (default 1)"},
    {"train", "--batch-size", "batch size (default 128, or the recipe's; under mpirun: per rank)"},
    {"eval", "--batch-size", "batch size (default 250)"},
    {"predict", "--batch-size", "images per forward pass (default 16)"},
    {"predict", "--json", "JSON Lines: one object per image and line, {\"image\", \"top\": [{\"class\", \"name\", "
     "\"prob\"}, ...]} or {\"image\", \"error\"}"},
};

/* The option spelt name. */
const optdef *find_option(const char *name) {
    for (size_t k = 0; k < sizeof optdefs / sizeof optdefs[0]; k++)
        if (strcmp(optdefs[k].name, name) == 0) return &optdefs[k];
    return NULL;
}

/* The option name of command-line word arg: arg itself, or for argparse's `--name=value` form its name, copied into
 * name, with *value pointing at the value (else NULL). */
static const char *split_option(const char *arg, char name[64], const char **value) {
    const char *eq = strncmp(arg, "--", 2) == 0 ? strchr(arg, '=') : NULL;
    *value = NULL;
    if (!eq || eq - arg >= 64) return arg;
    snprintf(name, 64, "%.*s", (int)(eq - arg), arg);
    *value = eq + 1;
    return name;
}

/* True when option name (or another spelling of it) was on the command line. */
int given(const opts *o, const char *name) {
    const optdef *d = find_option(name);
    for (size_t k = 0; d && k < sizeof optdefs / sizeof optdefs[0]; k++)
        if (optdefs[k].off == d->off && o->given[k]) return 1;
    return 0;
}

/* True when the space-separated option list contains name as a whole word. */
int has_word(const char *list, const char *name) {
    size_t n = strlen(name);
    for (const char *p = list; (p = strstr(p, name)) != NULL; p += n)
        if ((p == list || p[-1] == ' ') && (p[n] == ' ' || p[n] == '\0')) return 1;
    return 0;
}


/* Sets option d (spelt a) of command cmd to the text v, checked as the command line is (what: where v comes from, for
 * the error message); returns -1 on an error. */
int set_option(const char *cmd, const optdef *d, const char *a, const char *v, const char *what, opts *o) {
    char *field = (char *)o + d->off;
    void (*const tell)(const char *, const char *, ...) = *what ? say : say_once; /* command line's: once */
    if (d->kind == O_STR) { /* an empty name or value is a mistake (`-w "$W"` with W unset), said as the option's */
        if (!*v) {
            tell(cmd, "option %s%s has an empty value (a name or value is needed)", a, what);
            return -1;
        }
        *(const char **)field = v;
        return 0;
    }
    if (d->kind == O_SIZE && strchr(v, 'x')) { /* HxW, each side in the range (N: as an integer option, below) */
        int h = 0, w = 0;
        if (vt_parse_size(v, &h, &w)) {
            tell(cmd, "bad value '%s' for %s%s (expected N or HxW: integers in [%.12g, %.12g])", v, a, what, d->lo,
                 d->hi);
            return -1;
        }
        if (h < d->lo || h > d->hi || w > d->hi) {
            tell(cmd, "%s must be in [%.12g, %.12g] a side, got %s%s", a, d->lo, d->hi, v, what);
            return -1;
        }
        o->img_size = h;
        o->img_w = w;
        return 0;
    }
    char *end = NULL;
    errno = 0;
    const double x = d->kind == O_DBL ? strtod(v, &end) : (double)strtoll(v, &end, 10);
    const int tiny = x != 0.0 && fabs(x) < FLT_MIN; /* 0 or subnormal once stored as a float */
    const int huge = d->kind != O_DBL && errno == ERANGE; /* an integer past 64 bits: outside every range below */
    const int blank = isspace((unsigned char)v[0]); /* strtod/strtoll skip leading blanks; trailing ones are refused */
    const int hex = d->kind == O_DBL && strpbrk(v, "xX"); /* strtod reads hexadecimal floats: decimal only */
    if ((errno && !huge) || !end || *end || end == v || !isfinite(x) || tiny || blank || hex) {
        tell(cmd, "bad value '%s' for %s%s (%s; expected %s in %c%.12g, %.12g%c)", v, a, what,
                hex ? "not a decimal number"
                : errno == ERANGE ? "out of range of a double, or too close to 0"
                : tiny          ? "too close to 0 for a float"
                : end && !*end && end != v && !blank ? "not finite"
                                           : d->kind == O_DBL ? "not a number" : "not an integer",
                d->kind == O_DBL ? "a number" : "an integer", d->lo_open ? '(' : '[', d->lo, d->hi,
                d->hi_open ? ')' : ']');
        return -1;
    }
    if (huge || x < d->lo || (d->lo_open && x == d->lo) || x > d->hi || (d->hi_open && x == d->hi)) {
        tell(cmd, "%s must be in %c%.12g, %.12g%c, got %s%s", a, d->lo_open ? '(' : '[',
                d->lo, d->hi, d->hi_open ? ')' : ']', v, what);
        return -1;
    }
    if (d->kind == O_DBL)
        *(double *)field = x;
    else if (d->kind == O_INT || d->kind == O_SIZE)
        *(int *)field = (int)x; /* every O_INT range lies inside int */
    else
        *(long long *)field = strtoll(v, NULL, 10); /* exact beyond 2^53 */
    if (d->kind == O_SIZE) o->img_w = 0; /* N: square */
    return 0;
}

/* Parses argv[2..] into o, accepting only the command's options; an option given again replaces its value (as
 * argparse: a script may override a shared argument list); `--` ends the options (an image named -x.png after it);
 * returns -1 on an error. */
int parse(const command *c, int argc, char **argv, opts *o) {
    _Static_assert(sizeof optdefs / sizeof optdefs[0] <= sizeof o->given, "opts.given too small");
    int positional = 0; /* after `--` every argument is the model or an image, whatever its first character */
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        if (!positional && strcmp(a, "--") == 0) {
            positional = 1;
            continue;
        }
        if (positional || a[0] != '-') {
            if (!o->model) {
                o->model = a;
            } else if (c->images) {
                o->images[o->nimages++] = a; /* main sized o->images for every argument */
            } else {
                say_once(NULL, "unexpected argument '%s'", a);
                return -1;
            }
            continue;
        }
        char name[64];
        const char *v = NULL;
        a = split_option(a, name, &v);
        const optdef *d = find_option(a);
        if (d && strcmp(a, "--help") && strcmp(a, "-h") && !has_word(c->options, a)) d = NULL;
        if (!d) {
            vt_nearest near = {.word = a};
            for (const char *w = c->options; *w;) { /* the command's options, a list of words */
                const size_t len = strcspn(w, " ");
                if (strncmp(w, "--fault-", 8) != 0) vt_nearest_try(&near, w, len); /* (test-only options) */
                w += len + strspn(w + len, " ");
            }
            char hint[80];
            vt_nearest_hint(&near, hint, sizeof hint);
            say_once(c->name, "unknown option '%s' (%ssee `vitc %s --help`)", a, hint, c->name);
            return -1;
        }
        o->given[d - optdefs] = 1;
        if (d->kind == O_FLAG && v) {
            say_once(c->name, "option %s takes no value (got '%s')", a, v);
            return -1;
        }
        if (d->kind == O_FLAG) {
            *(int *)((char *)o + d->off) = 1;
            continue;
        }
        if (v) {
            if (set_option(c->name, d, a, v, "", o)) return -1;
            continue;
        }
        if (i + 1 >= argc) {
            say_once(c->name, "option %s needs a value", a);
            return -1;
        }
        v = argv[++i];
        const char *vv = NULL; /* `-o --seed 3`, `-o -w W`, `-o --seed=3`, `-o --`: an option, not a value */
        if (v[0] == '-' && (strcmp(v, "--") == 0 || find_option(split_option(v, name, &vv)))) { /* or the end mark */
            say_once(c->name, "option %s needs a value, got the option %s%s%s%s", a, v, d->kind == O_STR ? " (a file of that "
                "name: ./" : "", d->kind == O_STR ? v : "", d->kind == O_STR ? ")" : "");
            return -1;
        }
        if (set_option(c->name, d, a, v, "", o)) return -1;
    }
    return 0;
}

/* Takes the model options `text` records (a file vitc wrote, path; what: the error's suffix; allowed: the options such
 * a file may record), "--opt value" pairs and flags separated by spaces (a value runs to the next " --"): those not on
 * the command line, nor in skip, are taken and marked given, and listed in taken (n bytes) when it is not NULL. The
 * text is split in place (o's pointers refer to it). */
int take_model_options(opts *o, const char *cmd, char *text, const char *allowed, const char *skip,
                              const char *path, const char *what, char *taken, size_t n) {
    size_t used = 0;
    unsigned char seen[sizeof o->given] = {0}; /* the options this record has named: vitc writes each once */
    if (taken && n) taken[0] = '\0';
    snprintf(o->record_path, sizeof o->record_path, "%s", path);
    snprintf(o->record_text, sizeof o->record_text, "%s", text);
    for (char *p = text; *p;) {
        char *name = p, *end = strchr(p, ' '), *eq = strchr(p, '=');
        if (eq && (!end || eq < end)) end = eq; /* --name=value, as the library's reader takes it */
        if (end) *end = '\0';
        const optdef *d = find_option(name);
        if (!d || strncmp(name, "--", 2) != 0 || !has_word(allowed, name)) {
            say_once(cmd, "%s records the model option '%s': not a file vitc wrote", path, name);
            return -1;
        }
        p = end ? end + 1 : name + strlen(name);
        char *v = NULL;
        if (d->kind != O_FLAG) {
            v = p;
            char *next = strstr(p, " --");
            p = next ? next + 1 : p + strlen(p);
            if (next) *next = '\0';
            if (!*v) {
                say_once(cmd, "%s records the model option %s without a value", path, name);
                return -1;
            }
            if (has_word("--dims --depths --heads --windows", name)) vt_model_unblank_list(v);
        }
        if (seen[d - optdefs]) {
            say_once(cmd, "%s records the model option %s twice: not a file vitc wrote", path, name);
            return -1;
        }
        seen[d - optdefs] = 1;
        if (given(o, name) || (skip && has_word(skip, name))) continue;
        o->given[d - optdefs] = o->recorded[d - optdefs] = 1;
        o->heads_recorded |= strcmp(name, "--heads") == 0;
        o->size_recorded |= strcmp(name, "--img-size") == 0;
        if (!v)
            *(int *)((char *)o + d->off) = 1;
        else if (set_option(cmd, d, name, v, what, o))
            return -1;
        if (taken && used < n)
            used += (size_t)snprintf(taken + used, n - used, "%s%s%s%s", used ? " " : "", name, v ? " " : "",
                                     v ? v : "");
    }
    return 0;
}

/* The commands that load --weights: the model options the file records (VT_OPTIONS_KEY, which vitc writes into every
 * weight file) that the command line does not give are taken, said in a notice, when the file records the same model
 * (VT_MODEL_KEY); attention's --heads picks heads to draw, so there the recorded heads go to o->arch_heads (and
 * VT_HEADS_KEY, which files without the options record have too, applies after the first build). The file is
 * read once (a pipe cannot be read again) into o->wfile, which load_model uses; one that cannot be read is left to
 * load_model's message. 0, or the exit status after the message. */
int weights_options(opts *o, const command *cmd) {
    if (!has_word(cmd->options, "--weights") || !o->weights || !o->model || !vt_model_find(o->model)) return 0;
    if (cmd->images && o->nimages < 1) return missing_images(); /* before the weights' notices */
    if (vt_st_open(o->weights, &o->wfile, &o->werr)) { /* said when it is loaded, after the options' errors */
        o->wfile_open = -1;
        return 0;
    }
    o->wfile_open = 1;
    const char *rec = vt_st_meta(&o->wfile, VT_OPTIONS_KEY), *model = vt_st_meta(&o->wfile, VT_MODEL_KEY);
    o->form_from_file = has_word(cmd->options, "--train-form");
    const int other = model && vt_model_find(model) != vt_model_find(o->model);
    if (other && (!rec || !*rec)) /* said before any error about the data, which the other model may explain */
        notice("%s records the weights of %.64s, not of %s", o->weights, model, o->model);
    if (!rec || !*rec) return 0;
    if (!model || other) {
        notice("%s records the model options \"%.200s\" of %.64s: not taken for %s", o->weights, rec,
               model ? model : "another model", o->model);
        return 0;
    }
    char what[4200], taken[sizeof o->weights_model];
    snprintf(what, sizeof what, " (recorded in %s)", o->weights);
    if (strlen(rec) >= sizeof o->weights_model) {
        say(cmd->name, "%s records model options of %zu bytes: not a file vitc wrote", o->weights, strlen(rec));
        return 1;
    }
    memcpy(o->weights_model, rec, strlen(rec) + 1);
    const int attention = strcmp(cmd->name, "attention") == 0;
    if (attention) { /* the architecture's heads, for attention's first build (a malformed record: said below) */
        const int stages = vt_model_find(o->model)->arch.nstages;
        vt_model_overrides rov = vt_model_no_overrides();
        char store[sizeof o->weights_model];
        vt_err pe = {0};
        if (vt_model_parse_options(rec, stages, &rov, store, sizeof store, 1, &pe) == 0 && rov.heads[0] > 0) {
            size_t used = 0;
            for (int i = 0; i < stages && rov.heads[i] > 0 && used < sizeof o->arch_heads; i++)
                used += (size_t)snprintf(o->arch_heads + used, sizeof o->arch_heads - used, "%s%d", i ? "," : "",
                                         rov.heads[i]);
        }
    }
    if (take_model_options(o, cmd->name, o->weights_model, ARCH_OPTS SIZE_OPTS, attention ? "--heads " : NULL,
                           o->weights, what, taken, sizeof taken))
        return 1;
    if (taken[0]) notice("the model is built with the options %s records: %s", o->weights, taken);
    return 0;
}

/* The value of option d in o as text ("" for a flag; numbers in v, n bytes, which must hold one). */
const char *option_text(const opts *o, const optdef *d, char *v, size_t n) {
    const char *field = (const char *)o + d->off;
    v[0] = '\0';
    if (d->kind == O_STR) return *(const char *const *)field;
    if (d->kind == O_INT) snprintf(v, n, "%d", *(const int *)field);
    if (d->kind == O_SIZE && o->img_w) snprintf(v, n, "%dx%d", o->img_size, o->img_w);
    if (d->kind == O_SIZE && !o->img_w) snprintf(v, n, "%d", o->img_size);
    if (d->kind == O_DBL) snprintf(v, n, "%.17g", *(const double *)field);
    if (d->kind == O_LL) snprintf(v, n, "%lld", *(const long long *)field);
    return v;
}

/* Writes the options among `names` that were given (or taken on --resume) into buf (n bytes), "--opt value" pairs and
 * flags separated by spaces, in the form take_model_options reads; -1 if they do not fit or a value holds " --". */
int given_options(const opts *o, const char *names, char *buf, size_t n) {
    size_t used = 0;
    buf[0] = '\0';
    for (size_t k = 0; k < sizeof optdefs / sizeof optdefs[0]; k++) {
        const optdef *d = &optdefs[k];
        if (!o->given[k] || !has_word(names, d->name)) continue;
        char v[64];
        const char *val = option_text(o, d, v, sizeof v);
        const int m = snprintf(buf + used, n - used, "%s%s%s%s", used ? " " : "", d->name,
                               d->kind == O_FLAG ? "" : " ", d->kind == O_FLAG ? "" : val);
        if (m < 0 || (size_t)m >= n - used || strstr(val, " --")) return -1;
        used += (size_t)m;
    }
    return 0;
}

/* Prints lead, then text's words filled to HELP_COLUMNS columns (a UTF-8 character one column), later lines indented
 * by indent blanks. */
enum { HELP_COLUMNS = 100 };
static void print_filled(const char *lead, int indent, const char *text) {
    int col = printf("%s", lead), first = 1;
    for (const char *p = text + strspn(text, " "); *p; first = 0) {
        const size_t n = strcspn(p, " ");
        int w = 0;
        for (size_t k = 0; k < n; k++) w += ((unsigned char)p[k] & 0xc0) != 0x80;
        if (!first && col + 1 + w > HELP_COLUMNS) {
            col = printf("\n%*s", indent, "") - 1;
        } else if (!first) {
            col += printf(" ");
        }
        col += w;
        fwrite(p, 1, n, stdout);
        p += n;
        p += strspn(p, " ");
    }
    printf("\n");
}

void command_help(const command *c) {
    print_filled("usage: ", 4, c->usage);
    printf("\n");
    print_filled("", 0, c->summary);
    printf("\noptions:\n");
    for (size_t i = 0; i < sizeof optdefs / sizeof optdefs[0]; i++) {
        if (!has_word(c->options, optdefs[i].name)) continue;
        const char *help = optdefs[i].help;
        for (size_t k = 0; k < sizeof command_option_help / sizeof command_option_help[0]; k++)
            if (!strcmp(command_option_help[k].cmd, c->name) && !strcmp(command_option_help[k].opt, optdefs[i].name))
                help = command_option_help[k].help;
        char lead[64];
        snprintf(lead, sizeof lead, "  %-18s ", optdefs[i].name);
        print_filled(lead, 21, help);
    }
    print_filled("  --help             ", 21, "show this help");
    print_filled("  --                 ", 21, "ends the options: what follows is the model or an image (e.g. -x.png)");
}
