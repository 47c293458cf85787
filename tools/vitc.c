/* vitc command-line interface: parses arguments and calls the library. `vitc help` lists the subcommands. */
#include <cblas.h> /* openblas_set_num_threads */
#include <ctype.h>
#include <errno.h>
#include <float.h>
#include <math.h>
#include <omp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "vitc/attention.h"
#include "vitc/fileio.h"
#include "vitc/blocks.h"
#include "vitc/dataset.h"
#include "vitc/model.h"
#include "vitc/predict.h"
#include "vitc/safetensors.h"
#include "vitc/recipe.h"
#include "vitc/schedule.h"
#include "vitc/dist.h"
#include "vitc/train.h"
#include "vitc/weights.h"

typedef struct {
    const char *model, *weights, *input, *output, *attn, *ffn, *data, *out_dir, *resume, *dims, *depths, *heads;
    const char *windows; /* --windows */
    const char *blocks, *save_maps; /* attention: --blocks, --save-maps */
    int rollout;
    int img_size, in_chans, num_classes, json, batch, train, iters, threads, steps, epochs;
    int train_subset, test_subset, log_every, workers, cooldown_epochs;
    long long seed, fault_nan_step, fault_nan_eval;
    double lr, wd, warmup_epochs, smoothing, min_lr, warmup_lr, clip, crop_pct, drop_path;
    int help, profile, overwrite, csv;
    int no_overlap;    /* train under mpirun: allreduce the gradient buckets after backward, not during it */
    double bucket_mib; /* train under mpirun: gradient bucket size */
    int features, apply_transform, double_heads;
    int train_form; /* training form of re-parameterised models (cFFN branches, Next-ViT's unmerged BatchNorms) */
    int topk;
    const char *dtype;                        /* --dtype */
    const char *recipe, *init_from;           /* train: --recipe, --init-from */
    double mixup, cutmix, mixup_prob, mixup_switch, ema_decay; /* train: -1 when not given */
    int model_ema, no_model_ema, accum_steps; /* train */
    int repeated_aug, no_repeated_aug;        /* train */
    int augment, no_augment;                  /* train */
    const char *classes; /* --classes FILE: a run's classes.json */
    char **cls;          /* its names (ncls) */
    int ncls;
    const char **images; /* predict: the IMAGE arguments (pointers into argv; room for argc of them) */
    int nimages;
    char cmdline[2048];
    unsigned char given[128]; /* given[k]: optdefs[k] was on the command line */
    char resumed_data[4096], resumed_recipe[64]; /* train --resume: the checkpoint's data and recipe */
    char resumed_model[1024]; /* train --resume: the checkpoint's model options, split (o's pointers refer to it) */
    int heads_recorded;       /* train --resume: --heads came from the checkpoint (vt_model_overrides.recorded) */
    char arch_heads[96];      /* attention: the architecture's heads taken from the weights' record */
    char model_options[1024]; /* train: the options that configured the model, as recorded (record_model_options) */
    char weights_model[1024]; /* the model options the --weights file records, split (o's pointers refer to it) */
    vt_st_file wfile;         /* the --weights file, read by weights_options for load_model: wfile_open 1 */
    int wfile_open;           /* 1: wfile holds it; -1: it could not be read (werr, said by load_model); 0: unread */
    vt_err werr;
} opts;

typedef enum { O_STR, O_INT, O_LL, O_DBL, O_FLAG } okind;
typedef struct {
    const char *name;
    okind kind;
    size_t off;
    const char *help;
    double lo, hi; /* numeric options: the accepted range (finite values only) */
    int lo_open;   /* 1: the range excludes lo */
    int hi_open;   /* 1: the range excludes hi */
} optdef;

/* O: a string or flag option; NUM: a number in [lo, hi]; POS: a number in (0, hi]; BELOW: a number in [lo, hi).
 * Unset numbers keep their defaults, so a given value outside the range is an error rather than a silent fall-back
 * to the default. */
#define O(n, k, f, h) {n, k, offsetof(opts, f), h, 0, 0, 0, 0}
#define NUM(n, k, f, lo, hi, h) {n, k, offsetof(opts, f), h, lo, hi, 0, 0}
#define POS(n, k, f, hi, h) {n, k, offsetof(opts, f), h, 0, hi, 1, 0}
#define BELOW(n, k, f, lo, hi, h) {n, k, offsetof(opts, f), h, lo, hi, 0, 1}
static const optdef optdefs[] = {
    O("--weights", O_STR, weights, "W.safetensors: model weights (official state_dict names)"),
    O("-w", O_STR, weights, "same as --weights"),
    O("--input", O_STR, input, "X.safetensors holding `input` (B, C, H, W) [and `labels` (B,) for grad]"),
    O("--output", O_STR, output, "output safetensors file (`attention`: the PNG)"),
    O("-o", O_STR, output, "same as --output"),
    NUM("--img-size", O_INT, img_size, 1, 4096, "input image size (default: the model's)"),
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
    NUM("--threads", O_INT, threads, 1, 1024, "threads for OpenMP and OpenBLAS (default: all cores; under mpirun, "
      "per rank: the node's cores divided among its ranks)"),
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
      "them): default, deit, swin, flatten, groupmixformer, refiner, msf, hmhsa; `vitc train [MODEL] --recipe list` "
      "prints them all (with MODEL: its per-model rates) and takes no other option"),
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
    NUM("--accum-steps", O_INT, accum_steps, 1, 1e6, "micro-batches of --batch-size per optimiser step (default 1)"),
    O("--init-from", O_STR, init_from, "W.safetensors to fine-tune from: the head is re-initialised when "
      "--num-classes differs, position embeddings / relative-position tables are resized bicubically (as timm)"),
    NUM("--drop-path", O_DBL, drop_path, 0, 0.99, "stochastic depth: the last block drops its residual branches with this "
      "probability, earlier ones linearly less (timm; default: the named config's rate, e.g. 0.2 for Swin-T, 0 for "
      "most; 0 turns it off; bench: with --train or --data only)"),
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
    NUM("--log-every", O_INT, log_every, 1, 1e9, "progress line every N steps (default 50)"),
    NUM("--fault-nan-step", O_LL, fault_nan_step, 0, 9.2e18, "testing aid: poison the input of step N (0-based) with NaN "
      "(under mpirun: on the last rank only)"),
    NUM("--fault-nan-eval", O_LL, fault_nan_eval, 0, VT_EPOCHS_MAX, "testing aid: make the first validation logit "
      "of epoch N (0-based) NaN, the EMA's validation with --model-ema (under mpirun: on the last rank only)"),
    O("--profile", O_FLAG, profile,
      "print the time spent per op type (per kernel) with its kind (GEMM, GEMMs fused with other work, other), the "
      "split by kind and the 12 slowest nodes with their scope and shapes (with --json: the table on stderr, "
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
#undef O
#undef NUM
#undef POS
#undef BELOW

/* The help of an option in a command that reads it otherwise than its optdefs text says. */
static const struct {
    const char *cmd, *opt, *help;
} command_option_help[] = {
    {"attention", "--heads", "the heads to draw: all (default), mean (their mean) or indices such as 0,2"},
    {"forward", "--img-size", "input image size (default: the size of `input` where the model's weights fit any "
     "size, else the model's)"},
    {"grad", "--img-size", "input image size (default: the size of `input` where the model's weights fit any size, "
     "else the model's)"},
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

typedef struct {
    const char *name, *usage, *summary, *options;
    int (*run)(opts *o);
    int images; /* 1: positional arguments after MODEL are image files */
} command;

/* Under mpirun, "rank R: " for the ranks after the first (whose messages the README says are prefixed so); "" else. */
static const char *rank_tag(char *buf, size_t n) {
    int rank = 0;
    vt_dist_env(&rank, NULL, NULL);
    snprintf(buf, n, rank > 0 ? "rank %d: " : "", rank);
    return buf;
}

/* One message line on stderr, written at once (ranks under mpirun share the terminal): "vitc: " or "vitc CMD: " (cmd
 * non-NULL), the rank tag, text (its control characters escaped with clean: names from files) and a newline. */
static void say_text(const char *cmd, int clean, const char *text) {
    char tag[32], lead[96];
    snprintf(lead, sizeof lead, "vitc%s%.40s: %s", cmd ? " " : "", cmd ? cmd : "", rank_tag(tag, sizeof tag));
    vt_write_line(stderr, lead, text, clean);
}

/* say_text of lead and a formatted message whose text holds no names from files: nothing to escape. */
static void say_v(const char *cmd, const char *lead, const char *fmt, va_list ap) {
    char text[4096];
    const int n = snprintf(text, sizeof text, "%s", lead);
    vsnprintf(text + n, sizeof text - (size_t)n, fmt, ap);
    say_text(cmd, 0, text);
}

static void say(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(const char *cmd, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    say_v(cmd, "", fmt, ap);
    va_end(ap);
}

static int die(const char *fmt, const char *msg) {
    char line[4096]; /* one line, whatever bytes the names in it hold */
    snprintf(line, sizeof line, fmt, msg);
    say_text(NULL, 1, line);
    return 1;
}

/* 1 on the ranks after the first under mpirun: an error the command line makes is the same on every rank, and rank 0
 * alone prints it (once, not once per rank). */
static int later_rank(void) {
    int rank = 0;
    vt_dist_env(&rank, NULL, NULL);
    return rank > 0;
}

/* say() of an error the command line makes: printed by rank 0 alone under mpirun (later_rank). */
static void say_once(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say_once(const char *cmd, const char *fmt, ...) {
    if (later_rank()) return;
    va_list ap;
    va_start(ap, fmt);
    say_v(cmd, "", fmt, ap);
    va_end(ap);
}

/* die() of an error the command line makes: printed by rank 0 alone under mpirun; returns 1. */
static int die_once(const char *fmt, const char *msg) { return later_rank() ? 1 : die(fmt, msg); }

/* A required argument not given (what: e.g. "--weights"): prints "vitc: missing WHAT" and returns 2, a usage error. */
static int missing(const char *what) {
    say_once(NULL, "missing %s", what);
    return 2;
}

/* An option that can have no effect in command cmd (or an argument it cannot take): prints "vitc CMD: message" and
 * returns 2, the exit status of the other option errors. */
static int refuse(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int refuse(const char *cmd, const char *fmt, ...) {
    if (later_rank()) return 2; /* the command line's: printed by rank 0 */
    va_list ap;
    va_start(ap, fmt);
    say_v(cmd, "", fmt, ap);
    va_end(ap);
    return 2;
}

/* A one-line "vitc: notice: ..." on stderr: an option that changes nothing here, where refusing it would break
 * scripts that pass it everywhere. */
static void notice(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void notice(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    say_v(NULL, "notice: ", fmt, ap);
    va_end(ap);
}

/* The option spelt name. */
static const optdef *find_option(const char *name) {
    for (size_t k = 0; k < sizeof optdefs / sizeof optdefs[0]; k++)
        if (strcmp(optdefs[k].name, name) == 0) return &optdefs[k];
    return NULL;
}

/* True when option name (or another spelling of it) was on the command line. */
static int given(const opts *o, const char *name) {
    const optdef *d = find_option(name);
    for (size_t k = 0; d && k < sizeof optdefs / sizeof optdefs[0]; k++)
        if (optdefs[k].off == d->off && o->given[k]) return 1;
    return 0;
}

/* One thread setting for the whole process: --threads, else OMP_NUM_THREADS, else every online core (shared by the
 * `ranks` MPI ranks on this node: cores / ranks each, at least 1); more than the online cores or than OpenMP allows
 * is clamped with a notice (extra threads only contend for the cores, and an OMP_NUM_THREADS of 100000 crashed inside
 * OpenMP), OpenMP's dynamic team sizes are turned off, and ranks x
 * threads over the cores is warned about (by the node's first rank alone: the others share its setting). OpenBLAS
 * (OpenMP build) and oneDNN (OpenMP runtime) both run omp_get_max_threads() threads outside our parallel regions and
 * one inside them, so this one setting holds for every GEMM. */
static void set_threads(const opts *o) {
    int local_rank = 0, ranks = 1;
    vt_dist_env(NULL, &local_rank, &ranks);
    const int speak = local_rank == 0; /* the node's ranks share one setting: its first says it */
    const long online = sysconf(_SC_NPROCESSORS_ONLN), cores = online > 0 ? online : 1;
    const char *env = getenv("OMP_NUM_THREADS");
    long want = o->threads;
    const char *from = "--threads";
    if (want <= 0 && env && *env) {
        char *end = NULL;
        want = strtol(env, &end, 10); /* the first level of a nested list such as "4,2" */
        from = "OMP_NUM_THREADS";
        if (end == env || want <= 0 || (*end && *end != ',')) {
            if (speak)
                say(NULL, "notice: OMP_NUM_THREADS='%s' is not a thread count; ignored", env);
            want = 0; /* the default below */
        }
    }
    if (want <= 0) {
        want = cores / ranks > 0 ? cores / ranks : 1;
        from = "the online cores";
    }
    if (want > cores) {
        char asked[48]; /* as given: strtol caps a longer number at LONG_MAX */
        if (strcmp(from, "OMP_NUM_THREADS") == 0) {
            const int len = (int)strcspn(env, ",");
            snprintf(asked, sizeof asked, "%.*s%s", len < 40 ? len : 37, env, len < 40 ? "" : "...");
        } else {
            snprintf(asked, sizeof asked, "%ld", want);
        }
        if (speak)
            say(NULL, "notice: %s threads asked (%s) but %ld cores are online: using %ld threads", asked, from, cores,
                cores);
        want = cores;
    }
    const int usable = vt_threads_usable((int)want); /* OMP_THREAD_LIMIT, OMP_MAX_ACTIVE_LEVELS=0 */
    if (usable < want) {
        if (speak)
            say(NULL, "notice: %ld threads asked (%s) but OpenMP runs at most %d here (OMP_THREAD_LIMIT or "
                    "OMP_MAX_ACTIVE_LEVELS): using %d", want, from, usable, usable);
        want = usable;
    }
    omp_set_dynamic(0); /* exact teams: OpenBLAS's threaded sgemm hangs in a smaller one (OMP_DYNAMIC=true) */
    if (speak && ranks > 1 && want * ranks > cores)
        say(NULL, "warning: %d ranks x %ld threads (%s) on this node exceed its %ld cores; they will "
                "contend (set --threads)", ranks, want, want == 1 ? "the minimum" : from, cores);
    omp_set_num_threads((int)want);
    openblas_set_num_threads((int)want);
}

/* vt_model_parse_list, its message printed. */
static int parse_list(const char *opt, const char *list, int stages, int *v) {
    vt_err e = {0};
    return vt_model_parse_list(opt, list, stages, v, &e) ? die("%s", e.msg) : 0;
}

/* Checks that o->output may be written before any work: not a special file, not one of the command's inputs
 * (--weights, --input, the images). */
static int output_ok(const opts *o) {
    const char *fixed[2] = {o->weights, o->input};
    vt_err e = {0};
    if (vt_output_check(o->output, fixed, 2, &e) || vt_output_check(o->output, o->images, o->nimages, &e))
        return die("%s", e.msg);
    return 0;
}

/* Resolves the model name and the options that change it into cfg (the library checks them, then builds the model's
 * shapes once); 1 on an error, 2 on a malformed list option (--dims, --depths, --heads, --windows) or one the model
 * cannot apply or be built with. */
static int model_cfg(const opts *o, vt_model_cfg *cfg) {
    if (!o->model) return missing("MODEL (see `vitc list`)");
    const vt_model_cfg *base = vt_model_find(o->model);
    if (!base) return die_once("unknown model '%s' (see `vitc list`)", o->model);
    vt_model_overrides ov = vt_model_no_overrides();
    ov.img_size = o->img_size;
    ov.in_chans = o->in_chans;
    ov.num_classes = o->num_classes;
    ov.attn = o->attn;
    ov.ffn = o->ffn;
    ov.recorded = o->heads_recorded;
    const int ns = base->arch.nstages;
    if ((o->dims && parse_list("--dims", o->dims, ns, ov.dims)) ||
        (o->depths && parse_list("--depths", o->depths, ns, ov.depths)) ||
        (o->heads && parse_list("--heads", o->heads, ns, ov.heads)) ||
        (o->windows && parse_list("--windows", o->windows, ns, ov.windows)))
        return 2; /* a malformed value: a usage error, as for scalar options */
    ov.windows_listed = o->windows && strchr(o->windows, ',');
    ov.drop_path = (float)o->drop_path; /* -1 when not given: the named config's rate; 0 turns it off */
    if (o->crop_pct > 0) ov.crop_pct = (float)o->crop_pct;
    ov.train_form = o->train_form;
    ov.apply_transform = o->apply_transform;
    ov.double_heads = o->double_heads;
    ov.dtype = o->dtype;
    vt_err e = {0};
    if (vt_model_configure(base, &ov, cfg, &e)) /* an option the model cannot apply is a usage error */
        return e.code == VT_E_USAGE ? refuse(NULL, "%s", e.msg) : die_once("%s", e.msg);
    if (o->features && !cfg->family->features)
        return refuse(NULL, "%s has no stage feature maps (--features)", cfg->name);
    vt_model_summary sum; /* options a block refuses as the model is built (gma after a class token): usage too */
    if (vt_model_summarize(cfg, &sum, &e))
        return e.code == VT_E_USAGE ? refuse(NULL, "%s", e.msg) : die_once("%s", e.msg);
    vt_model_summary_free(&sum);
    return 0;
}

/* Frees the --weights file weights_options read, once its values are loaded. */
static void close_weights(opts *o) {
    if (o->wfile_open > 0) vt_st_close(&o->wfile);
    o->wfile_open = 0;
}

/* A parameter store holding the model's parameters, loaded from o->weights or, without it, initialised (seed); the
 * commands that need weights refuse a missing --weights first (a usage error). */
static vt_params *load_model(opts *o, const vt_model_cfg *cfg) {
    vt_err e = {0};
    if (o->weights && o->wfile_open < 0) { /* read once: a stream would be empty the second time */
        die("%s", o->werr.msg);
        return NULL;
    }
    vt_params *P = !o->weights          ? vt_params_new(&e)
                   : o->wfile_open > 0 ? vt_model_load_file(cfg, &o->wfile, o->weights, &e)
                                       : vt_model_load(cfg, o->weights, &e);
    close_weights(o);
    if (P && !o->weights && vt_model_init_params(cfg, P, (uint64_t)o->seed, &e)) {
        vt_params_free(P);
        P = NULL;
    }
    if (!P) die("%s", e.msg);
    return P;
}

/* The arithmetic eval and bench report when --dtype int8 ran no layer in int8, or --dtype bf16 no product in bf16. */
#define INT8_NONE "fp32 (int8 requested; no layer ran int8)"
#define BF16_NONE "fp32 (bf16 requested; no product ran bf16)"

/* The arithmetic eval and bench report for c: its --dtype when that ran (ran: some layer or product did), else fp32
 * with what was asked for. */
static const char *dtype_label(const vt_model_cfg *c, int ran) {
    if (!c->arch.int8 && !c->arch.bf16) return "fp32";
    return ran ? (c->arch.int8 ? "int8" : "bf16") : c->arch.int8 ? INT8_NONE : BF16_NONE;
}

/* Warns on stderr when c asks for int8 but u, what the graph that ran used, has no linear layer on the int8 kernel,
 * or for bf16 but no product ran bf16; returns 1 then. */
static int warn_dtype_fallback(const vt_model_cfg *c, vt_dtype_use u) {
    char msg[400];
    if (!vt_dtype_fallback(c, u, msg, sizeof msg)) return 0;
    fprintf(stderr, "vitc: warning: %s\n", msg);
    return 1;
}

/* Opens o->input into f (read once: a pipe cannot be read again); 0, or 1 after the error. */
static int open_input(const opts *o, vt_st_file *f) {
    vt_err e = {0};
    if (!o->input) return missing("--input");
    return vt_st_open(o->input, f, &e) ? die("%s", e.msg) : 0;
}

/* Reads `input` (B, C, H, W) from f (open_input of path) and checks it against cfg; returns the data and B. */
static float *read_input(const vt_model_cfg *cfg, vt_st_file *f, const char *path, int *B) {
    vt_err e = {0};
    float *x = NULL;
    int nd = -1;
    int64_t sh[VT_ST_MAXDIM];
    const vt_st_entry *ie = vt_st_find(f, "input");
    char buf[sizeof e.msg + VT_PATH_BRIEF + 8], brief[VT_PATH_BRIEF]; /* the file's name leaves room for the cause */
    path = vt_path_brief(path, brief, sizeof brief);
    if (ie && ie->dtype != VT_ST_F32 && ie->dtype != VT_ST_F16 && ie->dtype != VT_ST_BF16) {
        snprintf(buf, sizeof buf, "%s: tensor input has dtype %s; images must be F32 (or F16/BF16)", path,
                 vt_st_dtype_name(ie->dtype));
        die("%s", buf);
        return NULL;
    }
    if (vt_st_read_named(f, "input", &x, &nd, sh, &e)) {
        snprintf(buf, sizeof buf, "%s: %s", path, e.msg);
        die("%s", buf);
        return NULL;
    }
    const vt_arch_cfg *a = &cfg->arch;
    if (nd != 4 || sh[0] < 1 || sh[0] > 1 << 16 || sh[1] != a->in_chans || sh[2] != a->img_size ||
        sh[3] != a->img_size) {
        char dims[200] = "";
        for (int d = 0, n = 0; d < nd && n < (int)sizeof dims; d++)
            n += snprintf(dims + n, sizeof dims - (size_t)n, d ? ", %lld" : "%lld", (long long)sh[d]);
        snprintf(buf, sizeof buf, "%s: input has shape (%s) but %s expects (B, %d, %d, %d) with 1 <= B <= 65536; "
                 "see --img-size / --in-chans", path, dims, cfg->name, a->in_chans, a->img_size, a->img_size);
        die("%s", buf);
        vt_free(x);
        return NULL;
    }
    if (vt_first_nonfinite(x, sh[0] * sh[1] * sh[2] * sh[3]) >= 0) {
        die("%s: input contains NaN or Inf", path);
        vt_free(x);
        return NULL;
    }
    *B = (int)sh[0];
    return x;
}

/* Prints s as a CSV field (quoted when it holds a comma, a quote or a line break). */
static void csv_str(const char *s) {
    if (!strpbrk(s, ",\"\r\n")) {
        fputs(s, stdout);
        return;
    }
    putchar('"');
    for (; *s; s++) {
        if (*s == '"') putchar('"');
        putchar(*s);
    }
    putchar('"');
}

/* Every model with params and GMACs; --csv: timm-style columns (param_count in millions, gmacs per image). */
static int cmd_list(opts *o) {
    if (o->model) return refuse("list", "unexpected argument '%s' (`vitc list` takes no model)", o->model);
    if (o->csv)
        printf("model,param_count,gmacs,img_size,in_chans,num_classes,crop_pct,interpolation,family\n");
    else
        printf("%-36s %14s %9s  %s\n", "model", "params", "GMACs", "description");
    for (int i = 0; i < vt_model_count(); i++) {
        const vt_model_cfg *c = vt_model_at(i);
        vt_err e = {0};
        vt_model_summary s;
        const int ok = vt_model_summarize(c, &s, &e) == 0;
        if (o->csv) {
            csv_str(c->name);
            if (ok)
                printf(",%.6f,%.6f", s.params / 1e6, s.macs / 1e9);
            else
                printf(",,");
            printf(",%d,%d,%d,%.4g,", c->arch.img_size, c->arch.in_chans, c->arch.num_classes,
                   (double)(c->pre.crop_pct > 0.0f ? c->pre.crop_pct : 0.875f));
            csv_str(c->pre.interpolation ? c->pre.interpolation : "bicubic");
            putchar(',');
            csv_str(c->family->name);
            putchar('\n');
        } else if (ok) {
            printf("%-36s %14lld %9.3f  %s\n", c->name, (long long)s.params, s.macs / 1e9, c->description);
        } else {
            printf("%-36s  build error: %s\n", c->name, e.msg);
        }
        vt_model_summary_free(&s);
    }
    return 0;
}

/* The stages of c as JSON objects; a windowed family's window 0 (one global branch: FLatten-CSwin's L stages) as the
 * stage's side, the value --windows takes for it. */
static void print_stages_json(const vt_model_cfg *c) {
    const vt_arch_cfg *a = &c->arch;
    printf("\"stages\": [");
    for (int i = 0; i < a->nstages; i++) {
        char blocks[256];
        const int na = vt_model_stage_blocks(c, i, blocks, sizeof blocks);
        const int global = a->stages[i].window == 0 && (c->family->caps & VT_CAP_WINDOWS) && a->patch > 0;
        const int window = global ? a->img_size / (a->patch << i) : a->stages[i].window;
        printf("%s{\"dim\": %d, \"depth\": %d, \"heads\": %d, \"mlp_ratio\": %g, \"window\": %d, "
               "\"sr_ratio\": %d, \"attn\": \"%s\", \"attn_blocks\": %d, \"blocks\": \"%s\"}", i ? ", " : "",
               a->stages[i].dim, a->stages[i].depth, a->stages[i].heads, (double)a->stages[i].mlp_ratio,
               window, a->stages[i].sr_ratio, a->stages[i].attn, na, blocks);
    }
    printf("]");
}

static int cmd_info(opts *o) {
    vt_model_cfg c;
    const int mc = model_cfg(o, &c); /* 2: a malformed list option */
    if (mc) return mc;
    vt_err e = {0};
    vt_model_summary s;
    if (vt_model_summarize(&c, &s, &e)) return die("%s", e.msg);
    const vt_arch_cfg *a = &c.arch;
    const long long params = s.params, paper = s.paper_params, macs = s.macs;
    if (o->json) {
        printf("{\"name\": \"%s\", \"family\": \"%s\", \"params\": %lld, \"buffers\": %lld, "
               "\"params_linear_conv_weights\": %lld, \"macs\": %lld, \"gmacs\": %.6f, \"img_size\": %d, "
               "\"in_chans\": %d, \"num_classes\": %d, \"patch_size\": %d, \"embed_dim\": %d, \"depth\": %d, "
               "\"num_heads\": %d, \"double_heads\": %d, \"attn\": \"%s\", \"ffn\": \"%s\", \"train_form\": %d, ",
               c.name, c.family->name, params, (long long)s.buffers, paper, macs, macs / 1e9, a->img_size, a->in_chans,
               a->num_classes, a->patch, a->stages[a->nstages - 1].dim, vt_model_depth(&c), a->stages[0].heads,
               a->opts.double_heads, a->stages[0].attn, a->ffn, a->train_form);
        print_stages_json(&c);
        printf(", \"drop_path\": %g, \"pretrained\": {\"crop_pct\": %g, \"resize\": \"%s\", \"interpolation\": \"%s\", "
               "\"mean\": [%g, %g, %g], \"std\": [%g, %g, %g], \"dataset\": \"%s\"}", (double)a->drop_path,
               (double)c.pre.crop_pct, c.pre.squash ? "both sides" : "shorter side",
               c.pre.interpolation ? c.pre.interpolation : "", (double)c.pre.mean[0], (double)c.pre.mean[1],
               (double)c.pre.mean[2], (double)c.pre.std[0], (double)c.pre.std[1], (double)c.pre.std[2],
               c.pre.dataset ? c.pre.dataset : "");
        printf(", \"blocks\": [");
    } else {
        printf("model      %s (%s)\n", c.name, c.description);
        printf("input      %d x %d x %d, %d classes\n", a->in_chans, a->img_size, a->img_size, a->num_classes);
        for (int i = 0; i < a->nstages; i++) {
            const int dbl = a->opts.double_heads && strcmp(a->stages[i].attn, "hmhsa") == 0;
            char blocks[256];
            if (vt_model_stage_blocks(&c, i, blocks, sizeof blocks) >= 0 && blocks[0]) /* they differ (Next-ViT) */
                printf("stage %d    dim %d, depth %d: %s\n", i + 1, a->stages[i].dim, a->stages[i].depth, blocks);
            else
                printf("stage %d    dim %d, depth %d, heads %d%s, MLP %gx, attention %s\n", i + 1, a->stages[i].dim,
                       a->stages[i].depth, a->stages[i].heads, dbl ? " (doubled to run: --double-heads)" : "",
                       (double)a->stages[i].mlp_ratio, a->stages[i].attn);
        }
        printf("FFN        %s%s\n", a->ffn, a->train_form ? " (training form)" : "");
        printf("params     %lld (%.3f M); Linear/Conv weights only: %lld (%.3f M)\n", params, params / 1e6,
               paper, paper / 1e6);
        printf("buffers    %lld\n", (long long)s.buffers);
        printf("MACs       %lld (%.3f GMACs per image; 1 multiply-add = 1 MAC)\n\n", macs, macs / 1e9);
        printf("%-20s %12s %14s\n", "scope", "params", "MACs");
    }
    for (int i = 0, first = 1; i < s.nscopes; i++) {
        if (!s.scope_params[i] && !s.scope_macs[i]) continue;
        const char *nm = s.scope[i][0] ? s.scope[i] : "(top)";
        if (o->json)
            printf("%s{\"name\": \"%s\", \"params\": %lld, \"macs\": %lld}", first ? "" : ", ", nm,
                   (long long)s.scope_params[i], (long long)s.scope_macs[i]);
        else
            printf("%-20s %12lld %14lld\n", nm, (long long)s.scope_params[i], (long long)s.scope_macs[i]);
        first = 0;
    }
    if (o->json) printf("]}\n");
    vt_model_summary_free(&s);
    return 0;
}

static int cmd_init(opts *o) {
    vt_model_cfg c;
    const int mc = model_cfg(o, &c); /* 2: a malformed list option */
    if (mc) return mc;
    if (!o->output) return missing("-o OUTPUT");
    if (output_ok(o)) return 1;
    vt_params *P = load_model(o, &c);
    if (!P) return 1;
    vt_err e = {0};
    int rc = vt_params_save(P, o->output, &e) ? die("%s", e.msg) : 0;
    if (!rc) printf("wrote %s: %lld params of %s (seed %lld)\n", o->output, (long long)vt_params_count(P, VT_PARAM),
                    c.name, o->seed);
    vt_params_free(P);
    return rc;
}

/* The side of the square `input` in f, or 0 (no 4-D square input; read_input reports why). */
static int input_side(const vt_st_file *f) {
    const vt_st_entry *t = vt_st_find(f, "input");
    return t && t->ndim == 4 && t->shape[2] == t->shape[3] && t->shape[2] <= 4096 ? (int)t->shape[2] : 0;
}

/* cfg (model_cfg's) at the size of the input in f when --img-size is not given: the model's weights must fit any
 * size, or the input must have the model's size (a clear error otherwise). */
static int fit_input_size(const opts *o, const vt_st_file *f, vt_model_cfg *cfg) {
    const int side = o->img_size ? 0 : input_side(f);
    vt_err e = {0};
    if (side > 0 && vt_model_at_size(cfg, side, cfg, &e)) return die("%s", e.msg);
    return 0;
}

static int cmd_forward(opts *o) {
    vt_model_cfg c;
    vt_st_file f = {0};
    const int mc = model_cfg(o, &c); /* 2: a malformed list option */
    if (mc) return mc;
    if (!o->weights) return missing("--weights");
    if (!o->output) return missing("--output");
    if (output_ok(o)) return 1;
    const int ic = open_input(o, &f); /* 2: --input missing */
    if (ic) return ic;
    vt_params *P = fit_input_size(o, &f, &c) ? NULL : load_model(o, &c);
    if (!P) {
        vt_st_close(&f);
        return 1;
    }
    int B = 0, rc = 1;
    float *x = read_input(&c, &f, o->input, &B);
    vt_err e = {0};
    vt_predictor p = {0};
    if (x && vt_predictor_init(&p, &c, P, B, o->features ? VT_PRED_MAPS : VT_PRED_LOGITS, &e)) {
        die("%s", e.msg);
    } else if (x) {
        vt_predictor_forward(&p, x, B);
        warn_dtype_fallback(&c, vt_graph_dtype_use(p.g));
        vt_st_out out[VT_MAX_STAGES] = {
            {"logits", VT_ST_F32, 2, {B, c.arch.num_classes}, p.logits ? p.logits->data : NULL}};
        static const char *fname[VT_MAX_STAGES] = {"features.0", "features.1", "features.2", "features.3"};
        for (int i = 0; i < p.nmaps; i++) {
            out[i] = (vt_st_out){fname[i], VT_ST_F32, 4, {0}, p.maps[i]->data};
            for (int d = 0; d < 4; d++) out[i].shape[d] = p.maps[i]->shape[d];
        }
        const int nout = o->features ? p.nmaps : 1;
        int bad = -1;
        for (int i = 0; i < nout && bad < 0; i++) {
            int64_t n = 1;
            for (int d = 0; d < out[i].ndim; d++) n *= out[i].shape[d];
            if (vt_first_nonfinite(out[i].data, n) >= 0) bad = i;
        }
        if (bad >= 0)
            die("%s came out NaN or Inf: the input or the weights overflow float32 in the forward pass (nothing "
                "written)", out[bad].name);
        else
            rc = vt_st_write(o->output, out, nout, NULL, &e) ? die("%s", e.msg) : 0;
    }
    vt_predictor_free(&p);
    vt_free(x);
    vt_st_close(&f);
    vt_params_free(P);
    return rc;
}

static int cmd_grad(opts *o) {
    static const char *const adamw[] = {"--lr", "--weight-decay"};
    for (int i = 0; i < 2 && o->steps <= 1; i++)
        if (given(o, adamw[i]))
            return refuse("grad", "%s has no effect with --steps 1 (one forward/backward pass, no AdamW step): give "
                          "--steps N >= 2 for N-1 AdamW steps", adamw[i]);
    vt_model_cfg c;
    vt_st_file f = {0};
    const int mc = model_cfg(o, &c); /* 2: a malformed list option */
    if (mc) return mc;
    if (!o->weights) return missing("--weights");
    if (c.arch.int8) return refuse("grad", "--dtype int8 is for inference; take gradients in fp32 or bf16");
    if (!o->output) return missing("--output");
    if (output_ok(o)) return 1;
    const int ic = open_input(o, &f); /* 2: --input missing */
    if (ic) return ic;
    vt_params *P = NULL;
    if (!fit_input_size(o, &f, &c)) {
        c = vt_model_training_form(&c); /* the weights are the training form's (cFFN BN branches) */
        P = load_model(o, &c);
    }
    if (!P) {
        vt_st_close(&f);
        return 1;
    }
    int B = 0, rc = 1, steps = o->steps > 0 ? o->steps : 1;
    float *x = read_input(&c, &f, o->input, &B), *labf = NULL, *losses = NULL;
    int32_t *lab = NULL;
    int64_t nl = 0;
    vt_err e = {0};
    char brief[VT_PATH_BRIEF], buf[sizeof e.msg + VT_PATH_BRIEF + 8];
    vt_path_brief(o->input, brief, sizeof brief);
    if (x && vt_st_read_labels(&f, "labels", &lab, &nl, &e)) {
        snprintf(buf, sizeof buf, "%s: %s", brief, e.msg);
        die("%s", buf);
    } else if (x && nl != B) {
        snprintf(buf, sizeof buf, "%s: labels must have shape (B,) matching the input batch (%d), not (%lld,)", brief,
                 B, (long long)nl);
        die("%s", buf);
    } else if (x) {
        labf = malloc(sizeof(float) * (size_t)B);
        losses = malloc(sizeof(float) * (size_t)steps);
        int ok = labf && losses;
        if (!ok) die("%s", "out of memory");
        for (int b = 0; ok && b < B; b++) labf[b] = (float)lab[b]; /* vt_grad_steps checks them */
        if (ok && (vt_grad_steps(&c, P, x, labf, B, steps, o->lr > 0 ? o->lr : 1e-3, o->wd >= 0 ? o->wd : 0.0, losses,
                                 &e) ||
                   vt_params_save_grads(P, o->output, losses, steps, &e)))
            die("%s", e.msg);
        else if (ok)
            rc = 0;
    }
    free(labf);
    free(losses);
    vt_free(lab);
    vt_free(x);
    vt_st_close(&f);
    vt_params_free(P);
    return rc;
}

static int set_option(const char *cmd, const optdef *d, const char *a, const char *v, const char *what, opts *o);
static int has_word(const char *list, const char *name);

/* Copies the text v recorded in checkpoint path under key into buf, or says it is too long. */
static int copy_recorded(char *buf, size_t size, const char *v, const char *key, const char *path) {
    if (strlen(v) >= size) {
        say("train", "%s records a %s of %zu bytes: not a checkpoint vitc wrote", path, key, strlen(v));
        return -1;
    }
    memcpy(buf, v, strlen(v) + 1);
    return 0;
}

/* The options that configure a model (recorded by training runs). */
#define ARCH_OPTS "--attn --ffn --dims --depths --heads --windows --apply-transform --double-heads "
#define SIZE_OPTS "--img-size --in-chans --num-classes "
/* The options a training checkpoint records (the model's, and the arithmetic it trains in). */
#define RECORDED_OPTS ARCH_OPTS SIZE_OPTS "--dtype "

/* Takes the model options `text` records (a file vitc wrote, path; what: the error's suffix; allowed: the options such
 * a file may record), "--opt value" pairs and flags separated by spaces (a value runs to the next " --"): those not on
 * the command line, nor in skip, are taken and marked given, and listed in taken (n bytes) when it is not NULL. The
 * text is split in place (o's pointers refer to it). */
static int take_model_options(opts *o, const char *cmd, char *text, const char *allowed, const char *skip,
                              const char *path, const char *what, char *taken, size_t n) {
    size_t used = 0;
    if (taken && n) taken[0] = '\0';
    for (char *p = text; *p;) {
        char *name = p, *end = strchr(p, ' '), *eq = strchr(p, '=');
        if (eq && (!end || eq < end)) end = eq; /* --name=value, as the library's reader takes it */
        if (end) *end = '\0';
        const optdef *d = find_option(name);
        if (!d || strncmp(name, "--", 2) != 0 || !has_word(allowed, name)) {
            say(cmd, "%s records the model option '%s': not a file vitc wrote", path, name);
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
                say(cmd, "%s records the model option %s without a value", path, name);
                return -1;
            }
        }
        if (given(o, name) || (skip && has_word(skip, name))) continue;
        o->given[d - optdefs] = 1;
        o->heads_recorded |= strcmp(name, "--heads") == 0;
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
 * (VT_MODEL_KEY); attention's --heads picks heads to draw, so the heads come from VT_HEADS_KEY there. The file is
 * read once (a pipe cannot be read again) into o->wfile, which load_model uses; one that cannot be read is left to
 * load_model's message. 0, or the exit status after the message. */
static int weights_options(opts *o, const command *cmd) {
    if (!has_word(cmd->options, "--weights") || !o->weights || !o->model || !vt_model_find(o->model)) return 0;
    if (vt_st_open(o->weights, &o->wfile, &o->werr)) { /* said when it is loaded, after the options' errors */
        o->wfile_open = -1;
        return 0;
    }
    o->wfile_open = 1;
    const char *rec = vt_st_meta(&o->wfile, VT_OPTIONS_KEY), *model = vt_st_meta(&o->wfile, VT_MODEL_KEY);
    if (!rec || !*rec) return 0;
    if (!model || vt_model_find(model) != vt_model_find(o->model)) {
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
    if (take_model_options(o, cmd->name, o->weights_model, ARCH_OPTS SIZE_OPTS, attention ? "--heads " : NULL,
                           o->weights, what, taken, sizeof taken))
        return 1;
    if (taken[0]) notice("the model is built with the options %s records: %s", o->weights, taken);
    return 0;
}

/* The value of option d in o as text ("" for a flag; numbers in v, n bytes, which must hold one). */
static const char *option_text(const opts *o, const optdef *d, char *v, size_t n) {
    const char *field = (const char *)o + d->off;
    v[0] = '\0';
    if (d->kind == O_STR) return *(const char *const *)field;
    if (d->kind == O_INT) snprintf(v, n, "%d", *(const int *)field);
    if (d->kind == O_DBL) snprintf(v, n, "%.17g", *(const double *)field);
    if (d->kind == O_LL) snprintf(v, n, "%lld", *(const long long *)field);
    return v;
}

/* Writes the options among `names` that were given (or taken on --resume) into buf (n bytes), "--opt value" pairs and
 * flags separated by spaces, in the form take_model_options reads; -1 if they do not fit or a value holds " --". */
static int given_options(const opts *o, const char *names, char *buf, size_t n) {
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

/* Writes the model options given (or taken on --resume) into o->model_options, in the form take_model_options reads. */
static int record_model_options(opts *o) {
    if (given_options(o, RECORDED_OPTS, o->model_options, sizeof o->model_options))
        return die("%s", "the model options are too long to record in a checkpoint (or a value holds ' --')");
    return 0;
}

/* A checkpoint's metadata as key, value pairs of NUL-ended strings one after the other. */
typedef struct {
    char *buf;
    size_t len;
} recorded;

/* The value recorded for key, or NULL. */
static const char *rec_get(const recorded *r, const char *key) {
    for (size_t i = 0; r->buf && i < r->len;) {
        const char *k = r->buf + i, *v = k + strlen(k) + 1;
        if (strcmp(k, key) == 0) return v;
        i = (size_t)(v - r->buf) + strlen(v) + 1;
    }
    return NULL;
}

/* r: the metadata of checkpoint `path` as rank 0 reads it, on every rank (under mpirun the run folder need not exist
 * on the others' machines); r->buf NULL when rank 0 cannot read it. -1 on a failed broadcast. */
static int read_recorded(const vt_dist *d, const char *path, recorded *r, vt_err *e) {
    vt_st_file f;
    r->buf = NULL;
    r->len = 0;
    if (d->rank == 0 && vt_st_open(path, &f, e) == 0) {
        for (int i = 0; i < f.n_meta; i++) r->len += strlen(f.meta_keys[i]) + strlen(f.meta_vals[i]) + 2;
        char *p = r->buf = malloc(r->len ? r->len : 1);
        for (int i = 0; p && i < f.n_meta; i++) {
            const size_t a = strlen(f.meta_keys[i]) + 1, b = strlen(f.meta_vals[i]) + 1;
            memcpy(p, f.meta_keys[i], a);
            memcpy(p + a, f.meta_vals[i], b);
            p += a + b;
        }
        vt_st_close(&f);
        if (!r->buf) r->len = 0;
    }
    if (vt_dist_bcast_bytes(d, &r->buf, &r->len, e)) return -1;
    if (r->buf && (r->len == 0 || r->buf[r->len - 1] != '\0')) r->len = 0; /* (never: rank 0 built it) */
    return 0;
}

/* train --resume DIR: --out defaults to DIR, and each setting DIR's checkpoint records (vt_train's run settings, under
 * their option names) is the default of its option, checked as if given; a --recipe other than the checkpoint's keeps
 * that recipe's values instead of the recorded ones for what it sets. Under mpirun every rank takes rank 0's
 * checkpoint. A checkpoint that cannot be read is left to vt_train, which says what is wrong with it. */
static int resume_defaults(opts *o, const vt_dist *d) {
    if (!o->resume) return 0;
    if (!o->out_dir) o->out_dir = o->resume;
    char path[4096], what[4200];
    snprintf(path, sizeof path, "%s/checkpoint.safetensors", o->resume);
    snprintf(what, sizeof what, " (recorded in %s)", path);
    recorded f;
    vt_err e = {0};
    if (read_recorded(d, path, &f, &e)) return die("%s", e.msg);
    if (!f.buf) return 0;
    const char *rec = rec_get(&f, "recipe"), *mine = o->recipe ? o->recipe : "default";
    /* same: the recipe is the checkpoint's (a run without --recipe has vitc's defaults, the recipe "default") */
    const int same = !rec || strcmp(strcmp(rec, "none") ? rec : "default", mine) == 0 || !given(o, "--recipe");
    int rc = 0;
    if (rec && strcmp(rec, "none") && !given(o, "--recipe")) {
        rc = copy_recorded(o->resumed_recipe, sizeof o->resumed_recipe, rec, "recipe", path);
        o->recipe = o->resumed_recipe;
    }
    /* the recorded settings that are plain options; recipe: 1 for those a recipe sets */
    static const struct { const char *opt; int recipe; } plain[] = {
        {"--train-subset", 0}, {"--test-subset", 0}, {"--seed", 0}, {"--batch-size", 1}, {"--accum-steps", 1},
        {"--epochs", 1}, {"--cooldown-epochs", 1}, {"--lr", 1}, {"--min-lr", 1}, {"--warmup-lr", 1},
        {"--warmup-epochs", 1}, {"--weight-decay", 1}, {"--smoothing", 1}, {"--clip-grad", 1}, {"--mixup", 1},
        {"--cutmix", 1}, {"--mixup-prob", 1}, {"--mixup-switch-prob", 1}, {"--drop-path", 1}};
    for (size_t i = 0; rc == 0 && i < sizeof plain / sizeof plain[0]; i++) {
        const char *v = rec_get(&f, plain[i].opt + 2);
        if (!v || given(o, plain[i].opt) || (plain[i].recipe && !same)) continue;
        if (strstr(plain[i].opt, "-subset") && strcmp(v, "0") == 0) continue; /* 0: every image */
        rc = set_option("train", find_option(plain[i].opt), plain[i].opt, v, what, o);
    }
    if (rc == 0 && o->drop_path > 0 && !given(o, "--drop-path")) { /* recorded from the model's float: its shortest */
        char buf[32];                                              /* decimal, e.g. 0.1, not 0.10000000149011612 */
        for (int p = 1; p <= 9; p++) {
            snprintf(buf, sizeof buf, "%.*g", p, o->drop_path);
            if (strtof(buf, NULL) == (float)o->drop_path) break;
        }
        o->drop_path = strtod(buf, NULL);
    }
    const char *mo = rec_get(&f, "model-options");
    if (rc == 0 && mo) rc = copy_recorded(o->resumed_model, sizeof o->resumed_model, mo, "model-options", path);
    if (rc == 0 && mo) rc = take_model_options(o, "train", o->resumed_model, RECORDED_OPTS, NULL, path, what, NULL, 0);
    const char *data = rec_get(&f, "data"), *aug = rec_get(&f, "augment");
    const char *ra = rec_get(&f, "repeated-aug"), *ema = rec_get(&f, "model-ema-decay");
    if (rc == 0 && data && !given(o, "--data")) {
        rc = copy_recorded(o->resumed_data, sizeof o->resumed_data, data, "data", path);
        o->data = o->resumed_data;
    }
    if (aug && !given(o, "--augment") && !given(o, "--no-augment")) o->no_augment = strcmp(aug, "0") == 0;
    if (same && ra && !given(o, "--repeated-aug") && !given(o, "--no-repeated-aug")) {
        o->repeated_aug = strcmp(ra, "0") != 0;
        o->no_repeated_aug = !o->repeated_aug;
    }
    if (rc == 0 && same && ema && !given(o, "--model-ema") && !given(o, "--no-model-ema")) {
        o->model_ema = strcmp(ema, "0") != 0; /* the decay of a run without an EMA is recorded as 0 */
        o->no_model_ema = !o->model_ema;
        if (o->model_ema && !given(o, "--model-ema-decay"))
            rc = set_option("train", find_option("--model-ema-decay"), "--model-ema-decay", ema, what, o);
    }
    free(f.buf);
    return rc ? 1 : 0;
}

/* The recipe (--recipe, else vitc's defaults) with the explicit options over it. */
static int train_recipe(opts *o, vt_recipe *r) {
    vt_err e = {0};
    if (vt_recipe_get(o->recipe ? o->recipe : "default", o->model, r, &e))
        return e.code == VT_E_USAGE ? refuse("train", "%s", e.msg) : die("%s", e.msg);
    if (o->epochs) r->epochs = o->epochs;
    if (o->cooldown_epochs >= 0) r->cooldown_epochs = o->cooldown_epochs;
    if (o->batch) r->batch = o->batch;
    if (o->accum_steps) r->accum_steps = o->accum_steps;
    if (o->lr > 0) r->lr = o->lr, r->lr_given = 1;
    if (o->wd >= 0) r->weight_decay = o->wd;
    if (o->warmup_epochs >= 0) r->warmup_epochs = o->warmup_epochs;
    if (o->min_lr >= 0) r->min_lr = o->min_lr, r->min_lr_given = 1;
    if (o->warmup_lr >= 0) /* a share of the lr (MSF's) follows an --lr given on resume, the recorded start else */
        r->warmup_lr = o->warmup_lr,
        r->warmup_lr_given = given(o, "--warmup-lr") || !(r->warmup_lr_rel > 0) || !given(o, "--lr");
    if (o->smoothing >= 0) r->smoothing = o->smoothing;
    if (o->clip >= 0) r->clip_grad = o->clip;
    if (o->mixup >= 0) r->mixup.mixup_alpha = o->mixup;
    if (o->cutmix >= 0) r->mixup.cutmix_alpha = o->cutmix;
    if (o->mixup_prob >= 0) r->mixup.prob = o->mixup_prob;
    if (o->mixup_switch >= 0) r->mixup.switch_prob = o->mixup_switch;
    if (o->model_ema || o->no_model_ema) r->model_ema = o->model_ema;
    if (o->ema_decay >= 0) r->model_ema_decay = o->ema_decay;
    if (o->repeated_aug || o->no_repeated_aug) r->repeated_aug = o->repeated_aug;
    if (o->drop_path < 0 && r->drop_path >= 0) o->drop_path = r->drop_path; /* the recipe's rate for the model */
    r->drop_path = o->drop_path;
    return 0;
}

/* Where train's schedule option opt (--lr, --min-lr, --warmup-lr, --warmup-epochs) got its value, for messages: the
 * command line, the checkpoint resumed (recorded: set though not given), the recipe or vitc's default. */
static const char *lr_source(const opts *o, const char *opt, int recorded, char *buf, size_t n) {
    if (given(o, opt))
        snprintf(buf, n, "%s", opt);
    else if (recorded)
        snprintf(buf, n, "%s recorded in %s/checkpoint.safetensors", opt, o->resume);
    else if (o->recipe)
        snprintf(buf, n, "the %s recipe's %s", o->recipe, opt);
    else
        snprintf(buf, n, "the default %s", opt);
    return buf;
}

/* train --recipe list [MODEL]: every recipe's settings (MODEL: with its per-model rates); no other option. */
static int list_recipes(const opts *o) {
    for (size_t k = 0; k < sizeof optdefs / sizeof optdefs[0]; k++)
        if (o->given[k] && strcmp(optdefs[k].name, "--recipe") != 0)
            return refuse("train", "--recipe list prints the recipes and takes no other option (got %s)",
                          optdefs[k].name);
    if (o->model && !vt_model_find(o->model)) return die("unknown model '%s' (see `vitc list`)", o->model);
    int rank = 0;
    vt_dist_env(&rank, NULL, NULL);
    for (int i = 0; rank == 0 && i < vt_recipe_count(); i++) { /* under mpirun: listed once */
        vt_recipe r;
        vt_err e = {0};
        if (vt_recipe_get(vt_recipe_name(i), o->model, &r, &e)) return die("%s", e.msg);
        vt_recipe_print(&r, stdout);
    }
    return 0;
}

/* The longest warm-up after which a run of `epochs` (the cosine's) still trains at its peak learning rate: all of
 * them when the rate changes every step, one less when it changes once an epoch (an epoch after the warm-up must
 * run), two less under DeiT's main.py (whose epoch e trains at the value for e - 1). */
static int warmup_max(int epochs, int update) {
    const int n = epochs - (update == VT_SCHED_EPOCH ? 1 : update == VT_SCHED_DEIT ? 2 : 0);
    return n > 0 ? n : 0;
}

/* " (...)" for messages: how the learning rate of update mode `update` changes, or "" every step. */
static const char *update_words(int update) {
    return update == VT_SCHED_EPOCH ? " (the learning rate changes once an epoch)"
         : update == VT_SCHED_DEIT  ? " (the learning rate changes once an epoch, after it, as DeiT's main.py steps it)"
                                    : "";
}

/* Refuses the train options given that r (the resolved recipe) leaves without effect; 0 when there is none. Options
 * a resume took from its checkpoint are not given and never refused. */
static int train_unused_options(const opts *o, const vt_recipe *r) {
    const vt_mixup *m = &r->mixup;
    if (given(o, "--model-ema-decay") && !r->model_ema)
        return refuse("train", "--model-ema-decay has no effect without a weight EMA (%s): add --model-ema",
                      given(o, "--no-model-ema") ? "--no-model-ema"
                      : o->no_model_ema          ? "the run resumed keeps none"
                      : o->recipe                ? "the recipe keeps none"
                                                 : "off by default");
    if (given(o, "--mixup-prob") && !(m->mixup_alpha > 0 || m->cutmix_alpha > 0))
        return refuse("train", "--mixup-prob has no effect with mixing off (--mixup and --cutmix are 0): give --mixup "
                      "or --cutmix above 0");
    if (given(o, "--mixup-switch-prob") && !(m->mixup_alpha > 0 && m->cutmix_alpha > 0 && m->prob > 0))
        return refuse("train", "--mixup-switch-prob chooses between Mixup and CutMix, so it has no effect unless both "
                      "are on (here --mixup %g, --cutmix %g, --mixup-prob %g)", m->mixup_alpha, m->cutmix_alpha,
                      m->prob);
    if (given(o, "--warmup-epochs") && r->warmup_epochs > warmup_max(r->epochs, r->sched_update))
        return refuse("train", "--warmup-epochs %g does not end within the run (--epochs %d)%s: the learning rate "
                      "would never reach its peak; give at most %d", r->warmup_epochs, r->epochs,
                      update_words(r->sched_update), warmup_max(r->epochs, r->sched_update));
    if (given(o, "--warmup-lr") && r->warmup_epochs == 0)
        return refuse("train", "--warmup-lr has no effect without a warm-up (--warmup-epochs is 0%s)",
                      given(o, "--warmup-epochs") ? "" : ": the run resumed's or the recipe's");
    return 0;
}

/* Options of train's command line that contradict each other: refused as usage errors (exit status 2). */
static int train_contradictions(const opts *o) {
    static const char *const pairs[][2] = {{"--model-ema", "--no-model-ema"},
                                           {"--repeated-aug", "--no-repeated-aug"},
                                           {"--augment", "--no-augment"}};
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++)
        if (given(o, pairs[i][0]) && given(o, pairs[i][1]))
            return refuse("train", "%s and %s contradict each other", pairs[i][0], pairs[i][1]);
    if (given(o, "--resume") && given(o, "--init-from"))
        return refuse("train", "--resume and --init-from contradict each other: a resumed run continues its "
                               "checkpoint");
    if (given(o, "--resume") && given(o, "--overwrite")) { /* a run resumed in its own folder keeps its history */
        struct stat a, b;
        if (!o->out_dir || (stat(o->resume, &a) == 0 && stat(o->out_dir, &b) == 0 && a.st_dev == b.st_dev &&
                            a.st_ino == b.st_ino))
            return refuse("train", "--overwrite has no effect on a run resumed in its own folder (it continues its "
                          "history there); it replaces another run's folder given with --out");
    }
    return 0;
}

/* train on rank d of the run (one process without mpirun): from the options to vt_train. */
static int train_rank(opts *o, vt_dist *d) {
    vt_recipe r;
    vt_model_cfg c;
    if (resume_defaults(o, d) || record_model_options(o) || train_recipe(o, &r)) return 1;
    const int unused = train_unused_options(o, &r);
    if (unused) return unused;
    const int mc = model_cfg(o, &c); /* 2: a malformed list option */
    if (mc) return mc;
    if (c.arch.int8) return refuse("train", "--dtype int8 is for inference; train in fp32 or bf16");
    vt_train_opts t;
    vt_train_defaults(&t);
    if (!o->out_dir) return missing("--out RUN_DIR");
    if (o->data) t.data = o->data;
    t.data_recorded = o->resume && o->data && !given(o, "--data") && strcmp(o->data, "fashion-mnist") != 0;
    t.run_dir = o->out_dir;
    t.resume = o->resume;
    t.workers = o->workers;
    vt_err e = {0};
    if (d->size <= 1 && (given(o, "--bucket-mib") || given(o, "--no-overlap")))
        notice("%s%s%s: gradient averaging happens only under mpirun (data-parallel ranks); this run is one process",
               given(o, "--bucket-mib") ? "--bucket-mib" : "", given(o, "--bucket-mib") && o->no_overlap ? " and " : "",
               o->no_overlap ? "--no-overlap" : "");
    if (d->size > 1) {
        if (o->bucket_mib > 0) d->bucket_bytes = (size_t)(o->bucket_mib * 1048576.0);
        d->overlap = !o->no_overlap;
        if (t.workers == 0) /* the node's cores are shared by its ranks' loaders too */
            t.workers = vt_loader_default_workers() / d->local_size > 1 ? vt_loader_default_workers() / d->local_size
                                                                        : 1;
        t.dist = d;
    }
    r.world_size = d->size; /* a recipe's lr scales with the global batch */
    vt_recipe_apply(&r, &t);
    /* the schedule climbs from the warm-up lr to the peak, then the cosine falls to the final lr: a final lr above
     * the peak would raise it, a warm-up lr above it would lower it during the warm-up (unused without one), whatever
     * their source; both named when both are (rank 0 alone prints) */
    const int min_above = t.min_lr > t.lr, warm_above = t.warmup_epochs > 0 && t.warmup_lr > t.lr;
    if (min_above || warm_above) {
        char from[4200], peak[4200];
        lr_source(o, "--lr", o->lr > 0, peak, sizeof peak);
        if (min_above && d->rank == 0)
            fprintf(stderr, "vitc: the final learning rate %g (%s) is above the peak %g (%s): give --min-lr at most "
                    "%g (e.g. --min-lr 0)\n", t.min_lr, lr_source(o, "--min-lr", o->min_lr >= 0, from, sizeof from),
                    t.lr, peak, t.lr);
        if (warm_above && d->rank == 0)
            fprintf(stderr, "vitc: the warm-up's starting learning rate %g (%s) is above the peak %g (%s): the warm-up "
                    "would lower the learning rate to its peak; give --warmup-lr at most %g (e.g. --warmup-lr 0)\n",
                    t.warmup_lr, lr_source(o, "--warmup-lr", o->warmup_lr >= 0, from, sizeof from), t.lr, peak, t.lr);
        return 2; /* settings that contradict each other: a usage error */
    }
    /* a warm-up longer than the run, given, is refused (train_unused_options); from a recipe or a checkpoint, the
     * run is timm's, whose scheduler keeps warming up past the end: said once */
    char from[4200], notice[4800];
    const int wmax = warmup_max(t.epochs, t.sched_update);
    if (!given(o, "--warmup-epochs") && t.warmup_epochs > wmax) { /* printed by vt_train after its data checks */
        const int n = snprintf(notice, sizeof notice, "Note: the warm-up of %g epochs (%s) does not end within the "
                               "%s%d epoch%s%s: the learning rate ", t.warmup_epochs, lr_source(o, "--warmup-epochs",
                               o->warmup_epochs >= 0, from, sizeof from), t.cooldown_epochs > 0 ? "cosine's " :
                               "run's ", t.epochs, t.epochs == 1 ? "" : "s", update_words(t.sched_update));
        if (t.cooldown_epochs > 0 && t.warmup_epochs < t.epochs + t.cooldown_epochs) /* the cooldown after it */
            snprintf(notice + n, sizeof notice - (size_t)n, "rises for %g epochs without reaching its peak %g, then "
                     "drops to the final %g for the rest of the run's %d epochs (%d of cooldown), as in timm; give "
                     "--warmup-epochs at most %d to change it", t.warmup_epochs, t.lr, t.min_lr,
                     t.epochs + t.cooldown_epochs, t.cooldown_epochs, wmax);
        else
            snprintf(notice + n, sizeof notice - (size_t)n, "rises for the whole run and never reaches its peak %g nor "
                     "decays (as in timm); give --warmup-epochs at most %d to change it", t.lr, wmax);
        t.notice = notice;
    }
    if (!o->recipe) t.recipe = NULL; /* plain runs print and save no recipe */
    t.init_from = o->init_from;
    t.seed = (uint64_t)o->seed;
    t.augment = !o->no_augment;
    t.train_subset = o->train_subset;
    t.test_subset = o->test_subset;
    if (o->log_every > 0) t.log_every = o->log_every;
    if (o->fault_nan_step >= 0) t.fault_nan_step = o->fault_nan_step;
    if (o->fault_nan_eval >= 0) t.fault_nan_eval = o->fault_nan_eval;
    char line[sizeof o->cmdline + 32]; /* under mpirun with the rank count (a recipe's lr scales with it) */
    if (d->size > 1) snprintf(line, sizeof line, "mpirun -np %d %s", d->size, o->cmdline);
    else snprintf(line, sizeof line, "%s", o->cmdline);
    t.command_line = line;
    t.model_options = o->model_options;
    t.overwrite = o->overwrite;
    if (vt_train(&c, &t, &e) == 0) return 0;
    /* one report: the lowest failing rank's (die tags the others' with their rank); a rank failing alone stops all */
    if (!d->err_shared || d->err_reporter) die("%s", e.msg);
    if (d->size > 1 && !d->err_shared) vt_dist_abort(d, 1);
    return e.code == VT_E_USAGE ? 2 : 1; /* settings the run cannot take together (an odd batch with Mixup) */
}

/* Train options that may differ between the ranks of one mpirun: the paths of each machine's copies (compared by
 * presence) and each process's own settings (not compared). */
#define PATH_OPTS "--out --data --resume --init-from "
#define PROCESS_OPTS "--threads --workers --log-every "

/* The train command as every rank of an mpirun must give it: the model, then each given option with its value
 * ("--lr=5:0.001": the value's length first, so that no value can read as more options), PATH_OPTS by name alone
 * and PROCESS_OPTS left out; malloc'd, NULL if out of memory. */
static char *rank_command(const opts *o) {
    char *s = NULL;
    const char *model = o->model ? o->model : "";
    for (int pass = 0; pass < 2; pass++) { /* the length, then the text */
        size_t used = strlen(model);
        if (pass) memcpy(s, model, used + 1);
        for (size_t k = 0; k < sizeof optdefs / sizeof optdefs[0]; k++) {
            const optdef *d = &optdefs[k];
            if (!o->given[k] || has_word(PROCESS_OPTS, d->name)) continue;
            char v[64], len[24] = "";
            const char *val = d->kind == O_FLAG || has_word(PATH_OPTS, d->name) ? "" : option_text(o, d, v, sizeof v);
            if (*val) snprintf(len, sizeof len, "=%zu:", strlen(val));
            const size_t m = 1 + strlen(d->name) + strlen(len) + strlen(val);
            if (pass) snprintf(s + used, m + 1, " %s%s%s", d->name, len, val);
            used += m;
        }
        if (!pass && !(s = malloc(used + 1))) return NULL;
    }
    return s;
}

/* rank_command's text s for a message, in place: each "=LEN:" before a value becomes a blank; returns s. */
static char *readable(char *s) {
    char *w = s;
    for (const char *r = s; *r;) {
        size_t digits = r[0] == '=' ? strspn(r + 1, "0123456789") : 0;
        if (digits && r[1 + digits] == ':') {
            *w++ = ' ';
            r += digits + 2;
        } else {
            *w++ = *r++;
        }
    }
    *w = '\0';
    return s;
}

/* Under mpirun, before anything else reads the options: 0 when every rank gave rank 0's train command (rank_command),
 * else 2 on every rank, the lowest rank that differs saying how (a rank's options decide which collective calls it
 * makes: ranks given different ones would wait on each other forever), or 1 where the comparison failed. */
static int same_rank_command(vt_dist *d, const opts *o) {
    if (d->size <= 1) return 0;
    vt_err e = {0};
    char *mine = rank_command(o), *first = mine;
    size_t len = mine ? strlen(mine) + 1 : 0;
    const int bad = vt_dist_bcast_bytes(d, &first, &len, &e) != 0; /* the others' first: a copy of rank 0's */
    const int differs = !bad && (!mine || !first || strcmp(mine, first) != 0);
    const int rc = vt_dist_agree(d, bad || differs, &e);
    if (rc && d->err_reporter && (bad || !mine || !first))
        die("%s", bad ? e.msg : "out of memory");
    else if (rc && d->err_reporter)
        say("train", "its train command differs from rank 0's (rank 0: %s; rank %d: %s): under mpirun every rank runs "
            "the same command, except the paths given to --out, --data, --resume and --init-from and the values of "
            "--threads, --workers and --log-every (a rank given other options would wait forever on the others)",
            readable(first), d->rank, readable(mine));
    if (first != mine) free(first);
    free(mine);
    return !rc ? 0 : bad || !mine || !first ? 1 : 2; /* a rank that failed on no account of its own: 2 */
}

static int cmd_train(opts *o) {
    vt_err e = {0};
    vt_dist d; /* under mpirun: this rank of the data-parallel run; else one process, MPI untouched */
    if (vt_dist_init(&d, &e)) return die("%s", e.msg);
    /* the ranks' commands compared first: then every check below fails alike on every rank, and rank 0 says why */
    int rc = same_rank_command(&d, o);
    if (rc == 0 && o->recipe && strcmp(o->recipe, "list") == 0)
        rc = list_recipes(o);
    else if (rc == 0 && (rc = train_contradictions(o)) == 0)
        rc = train_rank(o, &d);
    vt_dist_finalize(&d);
    return rc;
}

static int read_classes(opts *o, int K);

static int cmd_eval(opts *o) {
    const char *data = o->data ? o->data : "fashion-mnist";
    if (o->classes && strcmp(data, "fashion-mnist") == 0)
        return refuse("eval", "--classes checks an image folder's classes (--data DIR); fashion-mnist has its own ten");
    vt_model_cfg c;
    const int mc = model_cfg(o, &c); /* 2: a malformed list option */
    if (mc) return mc;
    if (!o->weights) return missing("--weights");
    vt_data d;
    vt_err e = {0};
    if (read_classes(o, c.arch.num_classes)) return 1;
    /* with --classes the folder's val/ classes are scored by name against them, and no train/ is needed */
    if (vt_data_open_eval(&c, data, o->cls, o->ncls, o->test_subset, &d, &e)) return die("%s", e.msg);
    if (o->test_subset > d.val.n)
        notice("--test-subset %d is more than the %d test images: evaluating all of them", o->test_subset, d.val.n);
    vt_params *P = load_model(o, &c);
    if (!P) {
        vt_data_close(&d);
        return 1;
    }
    vt_eval_result r = {0}, rf = {0}; /* rf: the fp32 run a bf16 or int8 evaluation is compared with */
    const int B = o->batch > 0 ? o->batch : 250;
    vt_model_cfg cf = c;
    cf.arch.int8 = cf.arch.bf16 = 0;
    int rc = 0, agree = 0;
    const char *low = c.arch.int8 ? "int8" : c.arch.bf16 ? "bf16" : NULL; /* the lower precision asked for */
    if (low &&
        (!(rf.top1 = malloc(sizeof(int) * (size_t)d.val.n)) || !(r.top1 = malloc(sizeof(int) * (size_t)d.val.n))))
        rc = vt_seterr(&e, "out of memory");
    if (rc == 0) rc = vt_evaluate(&c, P, &d.val, &d.eval_tf, B, o->workers, NULL, &r, stderr, &e);
    const vt_dtype_use use = {r.linears, r.int8_linears, r.bf16_runs};
    const int q = rc == 0 && low && !warn_dtype_fallback(&c, use); /* compared with fp32 */
    if (rc == 0 && q) rc = vt_evaluate(&cf, P, &d.val, &d.eval_tf, B, o->workers, NULL, &rf, stderr, &e);
    for (int i = 0; rc == 0 && q && i < d.val.n; i++) agree += r.top1[i] >= 0 && r.top1[i] == rf.top1[i];
    const char *what = d.folder ? "validation" : "Fashion-MNIST test";
    const char *dtype = dtype_label(&c, q);
    if (rc)
        die("%s", e.msg);
    else if (o->json) {
        printf("{\"model\": \"%s\", \"dtype\": \"%s\", \"images\": %d, \"skipped\": %lld, \"loss\": %.6f, "
               "\"acc1\": %.4f, \"acc5\": %.4f", c.name, dtype, r.n, (long long)r.skipped, r.loss, 100 * r.acc1,
               100 * r.acc5);
        if (c.arch.int8) printf(", \"linears\": %d, \"int8_linears\": %d", use.linears, use.int8);
        if (q) printf(", \"fp32_acc1\": %.4f, \"top1_agreement\": %.4f", 100 * rf.acc1, 100.0 * agree / r.n);
        printf("}\n");
    } else {
        printf("%s%s on %s%s%s (%d image%s%s): loss %.4f, top-1 accuracy %.2f%%, top-5 accuracy %.2f%%\n", c.name,
               !q   ? c.arch.int8   ? " (fp32: int8 requested, no layer ran int8)"
                      : c.arch.bf16 ? " (fp32: bf16 requested, no product ran bf16)"
                                    : ""
               : c.arch.int8 ? " (int8)"
                             : " (bf16)",
               what,
               d.folder ? " " : "", d.folder ? data : "", r.n, r.n == 1 ? "" : "s",
               r.skipped ? ", unreadable ones skipped" : "", r.loss,
               100 * r.acc1, 100 * r.acc5);
        if (q)
            printf("fp32: top-1 accuracy %.2f%% (%s %+.2f points); top-1 agreement of %s with fp32: %.2f%% (%d of %d)",
                   100 * rf.acc1, low, 100 * (r.acc1 - rf.acc1), low, 100.0 * agree / r.n, agree, r.n);
        if (q && c.arch.int8) printf("; %d of %d linear layers ran int8", use.int8, use.linears);
        if (q) printf("\n");
    }
    if (rc == 0 && r.skipped) fprintf(stderr, "vitc: %lld unreadable images skipped\n", (long long)r.skipped);
    free(r.top1);
    free(rf.top1);
    vt_data_close(&d);
    vt_params_free(P);
    return rc ? 1 : 0;
}

static void json_str(const char *s);

/* The CPU's ISA as one phrase, e.g. "AVX-512 + AVX512_BF16". */
static const char *isa_phrase(const vt_machine *m, char *buf, size_t n) {
    snprintf(buf, n, "%s%s%s", m->avx512 ? "AVX-512" : m->avx2 ? "AVX2" : "below AVX2",
             m->avx512_bf16 ? " + AVX512_BF16" : "", m->amx ? " + AMX" : "");
    return buf;
}

static int cmd_bench(opts *o) {
    if (given(o, "--workers") && !o->data)
        return refuse("bench", "--workers sets the input pipeline's threads, which only --data DIR runs");
    if (given(o, "--drop-path") && !o->train && !o->data)
        return refuse("bench", "--drop-path acts only in a training step: add --train (inference has no stochastic "
                      "depth)");
    vt_model_cfg c;
    const int mc = model_cfg(o, &c); /* 2: a malformed list option */
    if (mc) return mc;
    int B = o->batch > 0 ? o->batch : 1, iters = o->iters > 0 ? o->iters : 10;
    if (o->csv && (o->json || o->profile)) return refuse("bench", "--csv excludes --json and --profile");
    if (c.arch.int8 && (o->train || o->data))
        return refuse("bench", "--dtype int8 is for inference, but %s benchmarks a training step",
                      o->train ? "--train" : "--data (which implies --train)");
    vt_bench_result r;
    vt_err e = {0};
    double pipe = 0.0; /* --data: the input pipeline's img/s alone, measured before the (training) step */
    const int workers = o->workers > 0 ? o->workers : vt_loader_default_workers();
    if (o->data) {
        vt_data d;
        o->train = 1;
        if (vt_data_open(&c, o->data, 1, 1, NULL, 0, 0, &d, &e)) return die("%s", e.msg);
        const int rc = vt_bench_input(&d, B, workers, iters > 20 ? iters : 20, &pipe, &e);
        vt_data_close(&d);
        if (rc) return die("%s", e.msg);
    }
    /* the --profile table: on stdout, or on stderr with --json (stdout holds the JSON object alone) */
    FILE *prof = o->profile ? (o->json ? stderr : stdout) : NULL;
    const int brc = vt_bench(&c, B, o->train, iters, prof, stderr, &r, &e);
    if (brc) return die("%s", e.msg);
    if (o->data && !o->json && !o->csv)
        printf("input pipeline (%s, batch %d, %d workers): %.1f img/s alone; training step %.1f img/s: %s\n", o->data,
               B, workers, pipe, r.img_per_s,
               pipe < r.img_per_s ? "input-bound (the GEMMs would wait for data)"
                                  : "not input-bound (the pipeline is faster than the step, if it gets the cores)");
    /* the options that made this model from the named one: a benchmark row of a variant names it */
    char mopts[1024], label[1300];
    if (given_options(o, RECORDED_OPTS "--train-form ", mopts, sizeof mopts)) snprintf(mopts, sizeof mopts, "...");
    snprintf(label, sizeof label, "%s%s%s", c.name, mopts[0] ? " " : "", mopts);
    if (o->csv) { /* timm benchmark.py's columns: --bench infer, or --bench train with --train */
        const char *m = o->train ? "train" : "infer";
        printf("model,%s_samples_per_sec,%s_step_time,%s_batch_size,%s_img_size,%sparam_count\n", m, m, m, m,
               o->train ? "" : "infer_gmacs,");
        csv_str(label);
        printf(",%.2f,%.3f,%d,%d,", r.img_per_s, r.ms_per_iter, B, c.arch.img_size);
        if (!o->train) printf("%.6f,", r.gmacs_per_img);
        printf("%.6f\n", r.params / 1e6);
        return 0;
    }
    const vt_machine *m = &r.machine;
    char rule[1024], warn[512], isa[64], lowwarn[400];
    const int warned = vt_gemm_warning(&r.gemm, m, warn, sizeof warn);
    const vt_dtype_use use = {r.linears, r.int8_linears, r.bf16_runs};
    const int fell_back = vt_dtype_fallback(&c, use, lowwarn, sizeof lowwarn); /* asked for int8 or bf16, ran fp32 */
    const int q8 = c.arch.int8 && !fell_back, b16 = c.arch.bf16 && !fell_back; /* what ran */
    vt_gemm_rule(&r.gemm, rule, sizeof rule);
    if (o->json) {
        printf("{\"model\": \"%s\", \"dtype\": \"%s\", \"batch\": %d, \"train\": %d, \"threads\": %d, \"img_per_s\": %.3f, "
               "\"ms_per_iter\": %.3f, \"ms_best_iter\": %.3f, \"gmacs_per_img\": %.6f, \"gmacs_run_per_img\": %.6f, "
               "\"gflops\": %.2f, "
               "\"sgemm_gflops\": %.2f, \"sgemm_gflops_openblas\": %.2f, \"sgemm_gflops_onednn\": %.2f, "
               "\"bf16_gemm_gflops\": %.2f, \"int8_gemm_gflops\": %.2f, \"arena_mib\": %.1f, \"peak_rss_mib\": %.1f, ",
               c.name, dtype_label(&c, !fell_back), B,
               o->train, omp_get_max_threads(), r.img_per_s, r.ms_per_iter,
               r.ms_best_iter, r.gmacs_per_img, r.gmacs_run_per_img,
               r.gflops,
               r.sgemm_gflops, r.sgemm_openblas, r.sgemm_onednn, r.bf16_gflops, r.int8_gflops, r.arena_mib,
               r.peak_rss_mib);
        if (o->data) printf("\"pipeline_img_per_s\": %.3f, \"workers\": %d, ", pipe, workers);
        printf("\"model_options\": ");
        json_str(mopts);
        printf(", \"cpu_model\": ");
        json_str(m->cpu_model);
        printf(", \"isa\": {\"avx2\": %s, \"avx512\": %s, \"avx512_bf16\": %s, \"amx\": %s}, \"openblas_core\": ",
               m->avx2 ? "true" : "false", m->avx512 ? "true" : "false", m->avx512_bf16 ? "true" : "false",
               m->amx ? "true" : "false");
        json_str(m->openblas_core);
        printf(", \"onednn_isa\": ");
        json_str(m->onednn_isa);
        printf(", \"linears\": %d, \"int8_linears\": %d, \"bf16_products\": %lld", r.linears, r.int8_linears,
               r.bf16_runs);
        if (o->profile)
            printf(", \"time_by_kind\": {\"gemm\": %.4f, \"fused\": %.4f, \"fused_gemm_calls\": %.4f, \"other\": %.4f}",
                   r.by_kind[VT_OP_GEMM], r.by_kind[VT_OP_FUSED], r.fused_gemm, r.by_kind[VT_OP_OTHER]);
        printf(", \"gemm_lib\": \"%s\", \"gemm_rule\": ", vt_gemm_lib_name(r.gemm.force));
        json_str(rule);
        printf(", \"gemm_warning\": ");
        if (warned)
            json_str(warn);
        else
            printf("null");
        printf("}\n");
        return 0;
    }
    /* % of the peak of the arithmetic its GEMMs run: the bf16 product's, the int8 layer's, else sgemm's */
    const int bf = b16 && r.bf16_gflops > 0.0, i8 = q8 && r.int8_gflops > 0.0;
    const double peak = bf ? r.bf16_gflops : i8 ? r.int8_gflops : r.sgemm_gflops;
    char run[64] = ""; /* the MACs gflops counts, where the graph runs fewer than the model's summary */
    if (r.gmacs_run_per_img < 0.9995 * r.gmacs_per_img)
        snprintf(run, sizeof run, " (%.3f run)", r.gmacs_run_per_img);
    printf("%s%s%s%s %s batch %d, %d threads: %.2f img/s (%.1f ms/iter, fastest %.1f), %.3f GMACs/img%s, %.1f GFLOP/s "
           "achieved (%.0f%% of %s peak %.1f GFLOP/s), arena %.1f MiB, peak RSS %.1f MiB\n",
           c.name, mopts[0] ? " [" : "", mopts, mopts[0] ? "]" : "",
           o->train ? b16 ? "bf16 train" : "train"
           : q8     ? "int8 inference"
           : b16    ? "bf16 inference"
                    : "inference",
           B,
           omp_get_max_threads(),
           r.img_per_s, r.ms_per_iter, r.ms_best_iter, r.gmacs_per_img, run, r.gflops,
           100 * r.gflops / peak, bf ? "the bf16 GEMM" : i8 ? "the int8 GEMM" : "sgemm", peak, r.arena_mib,
           r.peak_rss_mib);
    printf("cpu: %s, %s\n", m->cpu_model, isa_phrase(m, isa, sizeof isa));
    printf("gemm kernels: OpenBLAS \"%s\" (%s), oneDNN %s (%s); sgemm 1024^3: OpenBLAS %.1f, oneDNN %.1f GFLOP/s\n",
           m->openblas_core, vt_isa_name(r.gemm.openblas), m->onednn_isa, vt_isa_name(r.gemm.onednn), r.sgemm_openblas,
           r.sgemm_onednn);
    printf("gemm dispatch (%s): %s\n", vt_gemm_lib_name(r.gemm.force), rule);
    if (b16)
        printf("bf16: products of >= 2^20 multiply-adds outside the attention kernels ran on bf16 inputs summed in "
               "fp32; bf16 GEMM 1024^3 (inputs converted, oneDNN bf16 matmul): %.1f GFLOP/s, %.2fx the sgemm\n",
               r.bf16_gflops, r.bf16_gflops / r.sgemm_gflops);
    if (fell_back)
        printf("WARNING: %s\n", lowwarn);
    else if (q8)
        printf("int8: %d of %d linear layers run the int8 kernel (the others: shapes where fp32 measured faster, or "
               "GroupMixFormer's qkv, which has no int8 kernel); "
               "int8 linear 1024^3 (input quantised each run, oneDNN u8 x s8 matmul): %.1f GFLOP/s, %.2fx the sgemm\n",
               r.int8_linears, r.linears, r.int8_gflops, r.int8_gflops / r.sgemm_gflops);
    if (warned) printf("WARNING: %s\n", warn);
    return 0;
}

/* Training-form weights -> deployed weights (the family's re-parameterisation merge, e.g. cFFN branches). */
static int cmd_deploy(opts *o) {
    vt_model_cfg c;
    const int mc = model_cfg(o, &c); /* 2: a malformed list option */
    if (mc) return mc;
    if (!o->weights) return missing("--weights");
    if (!o->output) return missing("-o OUTPUT");
    if (output_ok(o)) return 1;
    c = vt_model_training_form(&c);
    vt_params *P = load_model(o, &c);
    if (!P) return 1;
    vt_err e = {0};
    vt_params *D = vt_params_new(&e);
    int rc = !D || vt_model_deploy(&c, P, D, &e) || vt_params_save(D, o->output, &e);
    if (rc)
        die("%s", e.msg);
    else
        printf("wrote %s: %lld deployed params of %s (from %lld training-form params)\n", o->output,
               (long long)vt_params_count(D, VT_PARAM), c.name, (long long)vt_params_count(P, VT_PARAM));
    vt_params_free(D);
    vt_params_free(P);
    return rc;
}

/* Prints s as a JSON string (quoted, with quotes, backslashes and control characters escaped). */
static void json_str(const char *s) {
    putchar('"');
    const size_t n = strlen(s);
    size_t bad = 0; /* where the next byte outside valid UTF-8 is (n: none), found from i when i has passed it */
    for (size_t i = 0; i < n; i++) {
        if (i == 0 || bad < i) {
            size_t off = 0;
            bad = vt_utf8_valid((const uint8_t *)s + i, n - i, &off) ? n : i + off;
        }
        if (i == bad) {
            printf("\\ufffd"); /* a byte outside valid UTF-8 (a file name's, a cut message's): JSON stays valid */
            continue;
        }
        if (s[i] == '"' || s[i] == '\\')
            printf("\\%c", s[i]);
        else if ((unsigned char)s[i] < 0x20)
            printf("\\u%04x", (unsigned char)s[i]);
        else
            putchar(s[i]);
    }
    putchar('"');
}

/* Class i's name: from --classes, else the model's dataset's (NULL: none). */
static const char *class_name(const opts *o, const vt_model_cfg *c, int i) {
    if (o->cls) return i >= 0 && i < o->ncls ? o->cls[i] : NULL;
    return vt_model_class_name(c, i);
}

/* Reads --classes (when given) into o->cls; its class count must be the model's (K). */
static int read_classes(opts *o, int K) {
    if (!o->classes) return 0;
    vt_err e = {0};
    if (vt_classes_read(o->classes, &o->cls, &o->ncls, &e)) return die("%s", e.msg);
    if (o->ncls != K) {
        fprintf(stderr, "vitc: %s names %d classes but the model has %d outputs: for weights of %d classes add "
                "--num-classes %d; else give the classes.json of the run that made these weights\n", o->classes,
                o->ncls, K, o->ncls, o->ncls);
        return 1;
    }
    return 0;
}

/* predict without --classes: the classes.json beside the weights (a run folder's, written by training on an image
 * folder), said on stderr, when it names the model's K classes; its names beat the model's dataset's, which a run
 * on a folder does not share. */
static void classes_beside_weights(opts *o, int K) {
    if (o->classes || !o->weights) return;
    char path[4096], **names = NULL;
    vt_err e = {0};
    const int rc = vt_classes_beside(o->weights, K, &names, path, sizeof path, &e);
    if (rc < 0) notice("the classes.json beside the weights is not used: %s", e.msg);
    if (rc <= 0) return;
    notice("class names from %s (beside the weights; --classes picks another file)", path);
    o->cls = names;
    o->ncls = K;
}

/* Prints (or, with --json, writes as one JSON line) one image's top-k classes. */
static void print_top(const opts *o, const vt_model_cfg *c, const char *path, const vt_topk *t) {
    const int names = class_name(o, c, 0) != NULL;
    if (o->json) {
        printf("{\"image\": ");
        json_str(path);
        printf(", \"top\": [");
    } else {
        printf("%s\n", path);
    }
    for (int i = 0; i < t->k; i++) {
        const char *nm = names ? class_name(o, c, t->cls[i]) : NULL;
        if (o->json) {
            printf("%s{\"class\": %d, ", i ? ", " : "", t->cls[i]);
            if (nm) {
                printf("\"name\": ");
                json_str(nm);
                printf(", ");
            }
            printf("\"prob\": %.6f}", t->prob[i]);
        } else {
            int cols = 0; /* the name's width on a terminal: its characters, not its UTF-8 bytes */
            for (const unsigned char *q = (const unsigned char *)(nm ? nm : ""); *q; q++) cols += (*q & 0xC0) != 0x80;
            printf("  %d. class %-5d %s%*s %7.3f%%\n", i + 1, t->cls[i], nm ? nm : "", cols < 12 ? 12 - cols : 0, "",
                   100.0 * t->prob[i]);
        }
    }
    if (o->json) printf("]}\n");
}

/* Top-k classes of image files, preprocessed like the model's pretrained cfg (timm eval transform). */
static int cmd_predict(opts *o) {
    vt_model_cfg c;
    const int mc = model_cfg(o, &c); /* 2: a malformed list option */
    if (mc) return mc;
    if (!o->weights) return missing("--weights");
    if (o->nimages < 1) return missing("IMAGE (one or more image files after MODEL)");
    if (o->output && output_ok(o)) return 1;
    if (read_classes(o, c.arch.num_classes)) return 1;
    classes_beside_weights(o, c.arch.num_classes);
    const int n = o->nimages, K = c.arch.num_classes, k = o->topk > 0 ? o->topk : 5;
    if (k > VT_MAX_TOPK && K > VT_MAX_TOPK) /* a model of up to 64 classes lists them all */
        return refuse("predict", "--topk %d: at most %d classes are listed per image (%s has %d)", k, VT_MAX_TOPK,
                      c.name, K);
    if (k > K) notice("--topk %d is more than the %d classes of %s: listing %d", k, K, c.name, K);
    const int64_t per = (int64_t)c.arch.in_chans * c.arch.img_size * c.arch.img_size;
    vt_prediction *res = calloc((size_t)n, sizeof *res);
    float *keep = NULL; /* --output: every image's input, then every image's logits */
    vt_err e = {0};
    if (!res || (o->output && !(keep = vt_alloc(sizeof(float) * (size_t)n * (size_t)(per + K), &e)))) {
        free(res);
        return die("%s", "out of memory");
    }
    vt_params *P = load_model(o, &c);
    vt_dtype_use use = {0, 0, 0};
    int bad = P ? vt_predict_files(&c, P, o->images, n, o->batch > 0 ? o->batch : 16, k, res, keep,
                                   keep ? keep + n * per : NULL, &use, stderr, &e)
                : -1;
    int rc = bad != 0;
    if (bad < 0 && P) die("%s", e.msg);
    if (bad >= 0) warn_dtype_fallback(&c, use);
    for (int i = 0; bad >= 0 && i < n; i++) {
        if (res[i].ok) {
            print_top(o, &c, o->images[i], &res[i].top);
            continue;
        }
        if (o->json) {
            printf("{\"image\": ");
            json_str(o->images[i]);
            printf(", \"error\": ");
            json_str(res[i].err.msg);
            printf("}\n");
        }
        fprintf(stderr, "vitc: %s\n", res[i].err.msg);
    }
    if (bad > 0 && keep) {
        die("%s", "--output not written: some images could not be read");
    } else if (bad == 0 && keep) {
        vt_st_out out[2] = {{"input", VT_ST_F32, 4, {n, c.arch.in_chans, c.arch.img_size, c.arch.img_size}, keep},
                            {"logits", VT_ST_F32, 2, {n, K}, keep + n * per}};
        if (vt_st_write(o->output, out, 2, NULL, &e)) rc = die("%s", e.msg);
    }
    vt_free(keep);
    free(res);
    vt_params_free(P);
    return rc;
}

/* vt_parse_index_list of the list s (what: its option, in messages) into out (at most max); -1 after the message. */
static int index_list(const char *what, const char *s, int *out, int max) {
    vt_err e = {0};
    const int n = vt_parse_index_list(s, what, out, max, &e);
    return n >= 0 ? n : die("%s", e.msg) * -1;
}

/* attention, whose --heads picks the heads to draw: the head counts per stage the weights record (their vitc_heads
 * metadata, as run) in the form --heads takes for building c (halved on the stages --double-heads doubles), into
 * list (n bytes); 1 when they differ from c's, 0 when they do not or none are recorded, -1 when the record is not one
 * count per stage. */
static int recorded_heads(const vt_model_cfg *c, const vt_st_file *f, char *list, size_t n) {
    const char *rec = vt_st_meta(f, VT_HEADS_KEY);
    char have[64];
    vt_model_heads(c, have, sizeof have);
    size_t len = 0;
    const char *p = rec && strcmp(rec, have) != 0 ? rec : "";
    int i = 0;
    list[0] = '\0';
    for (; *p && i < c->arch.nstages && len < n; i++) {
        char *end = NULL;
        errno = 0;
        const long h = strtol(p, &end, 10);
        if (end == p || errno || h < 1 || h > 4096 || (*end && *end != ',')) break;
        const int dbl = c->arch.opts.double_heads && strcmp(c->arch.stages[i].attn, "hmhsa") == 0;
        len += (size_t)snprintf(list + len, n - len, "%s%ld", i ? "," : "", dbl ? h / 2 : h);
        p = *end == ',' ? end + 1 : end;
    }
    if (*p || (list[0] && i != c->arch.nstages)) return -1;
    return list[0] != '\0';
}

/* The model of `attention`: c rebuilt with the heads the weights f record where they differ (said on stderr: the
 * tensors of some hosts, Swin's relative-position tables, hMHSA's maps, have shapes that depend on the heads), its
 * tensors then checked against f; 0, or an exit status after the message. */
static int model_of_weights(opts *o, vt_model_cfg *c, const vt_st_file *f) {
    vt_err e = {0};
    char list[sizeof o->arch_heads];
    const int hr = recorded_heads(c, f, list, sizeof list);
    if (hr > 0) {
        notice("%s records %s attention heads per stage (as run): the model is built with them", o->weights,
               vt_st_meta(f, VT_HEADS_KEY));
        snprintf(o->arch_heads, sizeof o->arch_heads, "%s", list);
        o->heads = o->arch_heads;
        const int mc = model_cfg(o, c);
        if (mc) return mc;
    }
    if (vt_model_check_tensors(c, f, o->weights, &e)) return die("%s", e.msg);
    if (!vt_st_meta(f, VT_HEADS_KEY)) { /* converted checkpoints: their heads are the named model's, unless changed */
        char have[64];
        vt_model_heads(c, have, sizeof have);
        notice("%s records no attention heads (%s): the maps are split into %s heads per stage, as the model is "
               "built", o->weights, VT_HEADS_KEY, have);
    }
    if (hr < 0) { /* the tensors fit the model: the record does not */
        char msg[600];
        snprintf(msg, sizeof msg, "%s: its %s metadata \"%.60s\" is not one head count per stage of %s's %d stage%s: "
                 "not a file vitc wrote", o->weights, VT_HEADS_KEY, vt_st_meta(f, VT_HEADS_KEY), c->name,
                 c->arch.nstages, c->arch.nstages == 1 ? "" : "s");
        return die("%s", msg);
    }
    return 0;
}

static int cmd_attention(opts *o) {
    vt_attn_viz_opts ao = {.png = o->output, .save_maps = o->save_maps, .rollout = o->rollout, .progress = stderr,
                           .notes = stderr};
    vt_err e = {0};
    const char *heads = o->heads;
    o->heads = NULL; /* --heads selects the heads to draw here, not the architecture's */
    if (heads && strcmp(heads, "mean") == 0)
        ao.head_mean = 1;
    else if (heads && strcmp(heads, "all") != 0 &&
             (ao.nheads = index_list("--heads (all, mean or indices)", heads, ao.heads,
                                     VT_ATTN_MAX_SEL)) < 0)
        return 2; /* malformed: a usage error */
    if (o->blocks && (ao.nblocks = index_list("--blocks", o->blocks, ao.blocks, VT_ATTN_MAX_SEL)) < 0)
        return 2;
    vt_model_cfg c;
    int mc = model_cfg(o, &c); /* 2: a malformed list option */
    if (mc) return mc;
    if (!o->weights) return missing("--weights");
    if (o->nimages < 1) return missing("IMAGE (one or more image files after MODEL)");
    if (!o->output && !o->save_maps) return missing("-o OUT.png (or --save-maps MAPS.safetensors)");
    if (heads && !o->output) /* --save-maps keeps every head */
        return refuse("attention", "--heads picks the heads drawn in the picture (-o); --save-maps keeps every head, "
                      "so without -o it can have no effect");
    const size_t len = o->output ? strlen(o->output) : 0;
    if (o->output && (len < 4 || strcasecmp(o->output + len - 4, ".png") != 0))
        return die("-o %s: the picture is written as PNG; give a name ending in .png", o->output);
    const char *fixed[1] = {o->weights};
    if ((o->output && vt_output_check(o->output, fixed, 1, &e)) ||
        (o->save_maps && vt_output_check(o->save_maps, fixed, 1, &e)))
        return die("%s", e.msg);
    /* read once (weights_options): its tensors against the model, its recorded heads, then its values */
    if (o->wfile_open < 0 || (!o->wfile_open && vt_st_open(o->weights, &o->wfile, &o->werr)))
        return die("%s", o->werr.msg);
    o->wfile_open = 1;
    vt_params *P = NULL;
    if (!(mc = model_of_weights(o, &c, &o->wfile)) && !(P = load_model(o, &c))) mc = 1;
    close_weights(o);
    if (mc) return mc;
    const int rc = vt_attention_pictures(&c, P, o->images, o->nimages, &ao, &e);
    vt_params_free(P);
    if (rc) return die("%s", e.msg);
    if (o->output) printf("wrote %s\n", o->output);
    if (o->save_maps) printf("wrote %s\n", o->save_maps);
    return 0;
}

/* Options that change a model's architecture (every command that builds one), and its input geometry (commands whose
 * input is not a fixed dataset). */
static const command commands[] = {
    {"list", "vitc list [--csv]", "every model name with params and GMACs", "--csv", cmd_list, 0},
    {"info", "vitc info MODEL [--img-size S] [--attn A] [--ffn F] [--dims ...] [--json]",
     "params, buffers, MACs of one image, per-block breakdown", SIZE_OPTS ARCH_OPTS "--json --train-form", cmd_info,
     0},
    {"init", "vitc init MODEL -o W.safetensors [--seed N] [model options]", "write the official initialisation",
     "--output -o --seed " SIZE_OPTS ARCH_OPTS "--train-form", cmd_init, 0},
    {"forward", "vitc forward MODEL --weights W --input X --output Y [model options]",
     "eval-mode logits (B, K) for `input` (B, C, H, W)",
     "--weights -w --input --output -o --threads --train-form --features --dtype " SIZE_OPTS ARCH_OPTS, cmd_forward, 0},
    {"grad", "vitc grad MODEL --weights W --input X --output G [--steps N --lr LR --weight-decay WD]",
     "train-mode loss and every parameter gradient (grad/<name>) on `input` and `labels`",
     "--weights -w --input --output -o --steps --lr --weight-decay --threads --dtype " SIZE_OPTS ARCH_OPTS, cmd_grad,
     0},
    {"train",
     "vitc train MODEL --data fashion-mnist|DIR --epochs E --batch-size B --lr LR --out RUN_DIR; to continue a run: "
     "vitc train MODEL --resume RUN_DIR [--epochs E]",
     "train with AdamW, warm-up + cosine, label smoothing, crop + flip (a recipe's DeiT transforms on image folders), "
     "Mixup/CutMix, weight EMA, gradient accumulation, named recipes (--recipe), fine-tuning (--init-from), "
     "data-parallel under mpirun; checkpoints, metrics.csv, curves.png",
     "--data --epochs --cooldown-epochs --batch-size --lr --weight-decay --warmup-epochs --min-lr --warmup-lr "
     "--smoothing --clip-grad "
     "--out --resume --overwrite --seed --augment --no-augment --train-subset --test-subset --log-every --threads "
     "--workers --fault-nan-step --fault-nan-eval --drop-path --recipe --mixup --cutmix --mixup-prob "
     "--mixup-switch-prob --model-ema --no-model-ema --model-ema-decay --accum-steps --init-from --repeated-aug "
     "--no-repeated-aug --bucket-mib --no-overlap --dtype "
     SIZE_OPTS ARCH_OPTS, cmd_train, 0},
    {"eval", "vitc eval MODEL --weights W --data fashion-mnist|DIR [--json]",
     "test (or DIR/val) loss, top-1 and top-5 accuracy",
     "--weights -w --data --batch-size --test-subset --json --threads --workers --classes --train-form --dtype " SIZE_OPTS
     ARCH_OPTS,
     cmd_eval, 0},
    {"bench", "vitc bench MODEL --batch-size B [--train] [--iters N] [--threads T] [--data DIR [--workers N]] "
     "[--json | --csv]",
     "img/s, GMACs, achieved GFLOP/s and the sgemm peak",
     "--batch-size --train --iters --threads --json --csv --profile --train-form --drop-path --data --workers --dtype "
     SIZE_OPTS ARCH_OPTS,
     cmd_bench, 0},
    {"deploy", "vitc deploy MODEL --weights TRAIN.safetensors -o DEPLOY.safetensors [model options]",
     "merge training-form weights (cFFN conv+BN branches, BN running stats) into the deployed form",
     "--weights -w --output -o " SIZE_OPTS ARCH_OPTS, cmd_deploy, 0},
    {"predict", "vitc predict MODEL --weights W [--topk K] [--json] [--output X.safetensors] IMAGE...",
     "top-k classes of image files (PNG, JPEG, BMP, GIF, TGA, PSD, HDR, binary PNM), preprocessed as the model's "
     "pretrained cfg",
     "--weights -w --topk --crop-pct --json --output -o --batch-size --train-form --threads --classes --dtype " SIZE_OPTS
     ARCH_OPTS, cmd_predict, 1},
    {"attention", "vitc attention MODEL --weights W IMAGE... -o OUT.png [--blocks 0,5,11] [--heads all|mean|0,2] "
     "[--rollout] [--save-maps MAPS.safetensors]",
     "pictures of the class token's (or mean query's) attention per block and head, overlaid on the images",
     "--weights -w --output -o --blocks --heads --rollout --save-maps --train-form --threads --attn --ffn --dims "
     "--depths --windows --apply-transform --double-heads --img-size --in-chans --num-classes",
     cmd_attention, 1},
};
#undef ARCH_OPTS
#undef SIZE_OPTS
static const int ncommands = (int)(sizeof commands / sizeof commands[0]);

static void usage(FILE *f) {
    fprintf(f, "vitc: vision transformers in C (forward, backward, training)\n\nusage:\n");
    for (int i = 0; i < ncommands; i++) fprintf(f, "  %-9s %s\n", commands[i].name, commands[i].summary);
    fprintf(f, "\n`vitc COMMAND --help` or `vitc help COMMAND` shows a command's options.\n");
}

/* True when the space-separated option list contains name as a whole word. */
static int has_word(const char *list, const char *name) {
    size_t n = strlen(name);
    for (const char *p = list; (p = strstr(p, name)) != NULL; p += n)
        if ((p == list || p[-1] == ' ') && (p[n] == ' ' || p[n] == '\0')) return 1;
    return 0;
}


static void command_help(const command *c) {
    printf("usage: %s\n\n%s\n\noptions:\n", c->usage, c->summary);
    for (size_t i = 0; i < sizeof optdefs / sizeof optdefs[0]; i++) {
        if (!has_word(c->options, optdefs[i].name)) continue;
        const char *help = optdefs[i].help;
        for (size_t k = 0; k < sizeof command_option_help / sizeof command_option_help[0]; k++)
            if (!strcmp(command_option_help[k].cmd, c->name) && !strcmp(command_option_help[k].opt, optdefs[i].name))
                help = command_option_help[k].help;
        printf("  %-18s %s\n", optdefs[i].name, help);
    }
    printf("  %-18s %s\n", "--help", "show this help");
}

/* Sets option d (spelt a) of command cmd to the text v, checked as the command line is (what: where v comes from, for
 * the error message); returns -1 on an error. */
static int set_option(const char *cmd, const optdef *d, const char *a, const char *v, const char *what, opts *o) {
    char *field = (char *)o + d->off;
    if (d->kind == O_STR) {
        *(const char **)field = v;
        return 0;
    }
    char *end = NULL;
    errno = 0;
    const double x = d->kind == O_DBL ? strtod(v, &end) : (double)strtoll(v, &end, 10);
    const int tiny = x != 0.0 && fabs(x) < FLT_MIN; /* 0 or subnormal once stored as a float */
    const int huge = d->kind != O_DBL && errno == ERANGE; /* an integer past 64 bits: outside every range below */
    const int blank = isspace((unsigned char)v[0]); /* strtod/strtoll skip leading blanks; trailing ones are refused */
    void (*const tell)(const char *, const char *, ...) = *what ? say : say_once; /* command line's: once */
    if ((errno && !huge) || !end || *end || end == v || !isfinite(x) || tiny || blank) {
        tell(cmd, "bad value '%s' for %s%s (%s; expected %s in %c%.12g, %.12g%c)", v, a, what,
                errno == ERANGE ? "out of range of a double, or too close to 0"
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
    else if (d->kind == O_INT)
        *(int *)field = (int)x; /* every O_INT range lies inside int */
    else
        *(long long *)field = strtoll(v, NULL, 10); /* exact beyond 2^53 */
    return 0;
}

/* Parses argv[2..] into o, accepting only the command's options; an option given again replaces its value (as
 * argparse: a script may override a shared argument list); returns -1 on an error. */
static int parse(const command *c, int argc, char **argv, opts *o) {
    _Static_assert(sizeof optdefs / sizeof optdefs[0] <= sizeof o->given, "opts.given too small");
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        if (a[0] != '-') {
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
        char name[64]; /* `--name=value` (argparse's form) as `--name value` */
        const char *eq = strncmp(a, "--", 2) == 0 ? strchr(a, '=') : NULL, *v = NULL;
        if (eq && (size_t)(eq - a) < sizeof name) {
            snprintf(name, sizeof name, "%.*s", (int)(eq - a), a);
            a = name, v = eq + 1;
        }
        const optdef *d = find_option(a);
        if (d && strcmp(a, "--help") && strcmp(a, "-h") && !has_word(c->options, a)) d = NULL;
        if (!d) {
            say_once(c->name, "unknown option '%s' (see `vitc %s --help`)", a, c->name);
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
        if (v[0] == '-' && find_option(v)) { /* `-o --seed 3`, `-o -w W`: an option, not a value */
            say_once(c->name, "option %s needs a value, got the option %s%s%s%s", a, v, d->kind == O_STR ? " (a file of that "
                "name: ./" : "", d->kind == O_STR ? v : "", d->kind == O_STR ? ")" : "");
            return -1;
        }
        if (set_option(c->name, d, a, v, "", o)) return -1;
    }
    return 0;
}

/* a as one shell word (command.txt's commands run again as they are): itself when it holds only characters no shell
 * reads specially, else in single quotes (a quote written '\''); into buf (n bytes), cut at its end if it is longer. */
static const char *shell_word(const char *a, char *buf, size_t n) {
    if (*a && strspn(a, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_@%+=:,./-") == strlen(a))
        return a;
    size_t k = 0;
    if (k + 1 < n) buf[k++] = '\'';
    for (; *a && k + 5 < n; a++) {
        if (*a == '\'') {
            memcpy(buf + k, "'\\''", 4);
            k += 4;
        } else {
            buf[k++] = *a;
        }
    }
    if (k + 1 < n) buf[k++] = '\'';
    buf[k < n ? k : n - 1] = '\0';
    return buf;
}

int main(int argc, char **argv) {
    if (argc >= 3 && strcmp(argv[1], "help") == 0) { /* vitc help COMMAND */
        for (int i = 0; i < ncommands; i++)
            if (strcmp(argv[2], commands[i].name) == 0) {
                command_help(&commands[i]);
                return 0;
            }
        fprintf(stderr, "vitc help: unknown command '%s'\n", argv[2]);
        usage(stderr);
        return 2;
    }
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "help") == 0) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    for (int i = 0; i < ncommands; i++) {
        if (strcmp(argv[1], commands[i].name) != 0) continue;
        int rank = 0;
        if (vt_dist_env(&rank, NULL, NULL) > 1 && strcmp(commands[i].name, "train") != 0) {
            if (rank == 0) /* every rank would run the whole command, printing and writing alike */
                refuse(commands[i].name, "runs in one process: under mpirun only train is data-parallel (run it "
                       "without mpirun, or with -np 1)");
            return 2;
        }
        opts o;
        memset(&o, 0, sizeof o);
        const char **images = calloc((size_t)argc, sizeof *images);
        if (!images) return die("%s", "out of memory");
        o.images = images;
        o.wd = o.warmup_epochs = o.min_lr = o.warmup_lr = o.smoothing = o.drop_path = -1;
        o.lr = o.clip = o.mixup = o.cutmix = o.mixup_prob = o.mixup_switch = o.ema_decay = -1;
        o.fault_nan_step = o.fault_nan_eval = o.cooldown_epochs = -1;
        if (parse(&commands[i], argc, argv, &o)) {
            free(images);
            return 2;
        }
        for (int k = 0, n = 0; k < argc && n < (int)sizeof o.cmdline - 2; k++) { /* as a shell re-reads it */
            char q[4096];
            n += snprintf(o.cmdline + n, sizeof o.cmdline - (size_t)n, "%s%s", shell_word(argv[k], q, sizeof q),
                          k + 1 < argc ? " " : "\n");
        }
        int rc = 0;
        if (o.help) {
            if (rank == 0) command_help(&commands[i]); /* (under mpirun: once) */
        } else {
            set_threads(&o);
            rc = weights_options(&o, &commands[i]);
            if (rc == 0) rc = commands[i].run(&o);
            close_weights(&o);
        }
        vt_classes_free(o.cls, o.ncls);
        free(images);
        return rc;
    }
    fprintf(stderr, "vitc: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
