/* The vitc command line's shared parts: the options (opts, optdefs), the commands' table entry, and the helpers the
 * command files share. main and the command table: tools/vitc.c; each helper's details: the comment on its
 * definition. */
#ifndef VITC_CLI_H
#define VITC_CLI_H

#include <stddef.h>

#include "vitc/dist.h"
#include "vitc/model.h"
#include "vitc/predict.h"
#include "vitc/safetensors.h"

typedef struct {
    const char *model, *weights, *input, *output, *attn, *ffn, *data, *out_dir, *resume, *dims, *depths, *heads;
    const char *windows; /* --windows */
    const char *blocks, *save_maps; /* attention: --blocks, --save-maps */
    int rollout;
    int img_size, in_chans, num_classes, json, batch, train, iters, threads, steps, epochs;
    int img_w; /* --img-size HxW: the width (img_size the height); 0: square */
    int train_subset, test_subset, log_every, workers, cooldown_epochs;
    int cos_reg; /* --cos-reg: -1 when not given */
    long long seed, fault_nan_step, fault_batch_step, fault_grad_step, fault_stop_step, fault_nan_eval;
    double lr, wd, warmup_epochs, smoothing, min_lr, warmup_lr, clip, crop_pct, drop_path;
    int help, profile, overwrite, csv;
    int no_overlap;    /* train under mpirun: allreduce the gradient buckets after backward, not during it */
    double bucket_mib; /* train under mpirun: gradient bucket size */
    int features, apply_transform, double_heads;
    int train_form; /* training form of re-parameterised models (cFFN branches, Next-ViT's unmerged BatchNorms) */
    int topk;
    const char *dtype;                        /* --dtype */
    int no_prepack;                           /* --no-prepack */
    const char *recipe, *init_from;           /* train: --recipe, --init-from */
    double mixup, cutmix, mixup_prob, mixup_switch, ema_decay; /* train: -1 when not given */
    int model_ema, no_model_ema, accum_steps; /* train */
    int repeated_aug, no_repeated_aug;        /* train */
    int sync_bn, no_sync_bn;                  /* train */
    int augment, no_augment;                  /* train */
    const char *classes; /* --classes FILE: a run's classes.json */
    char **cls;          /* its names (ncls) */
    int ncls;
    const char **images; /* predict: the IMAGE arguments (pointers into argv; room for argc of them) */
    int nimages;
    char *cmdline; /* the command line as a shell re-reads it, a line (malloc'd; train records it) */
    unsigned char given[128]; /* given[k]: optdefs[k] was on the command line */
    unsigned char recorded[128]; /* recorded[k]: optdefs[k] was taken from a file's record (take_model_options) */
    char record_path[4096];      /* that file, and its record as written (for the errors the record causes) */
    char record_text[1024];
    char resumed_data[4096], resumed_recipe[64]; /* train --resume: the checkpoint's data and recipe */
    char resumed_model[1024]; /* train --resume: the checkpoint's model options, split (o's pointers refer to it) */
    int heads_recorded;       /* train --resume: --heads came from the checkpoint (vt_model_overrides.recorded) */
    int form_from_file;       /* model_cfg builds a model in the training form the --weights file holds (commands
                               * with --train-form only) */
    int size_recorded;        /* --img-size came from the --weights file's record: the size the weights were saved at,
                               * which forward and grad replace by their input's where the weights fit any size */
    char arch_heads[96];      /* attention: the architecture's heads taken from the weights' record */
    char model_options[1024]; /* train: the options that configured the model, as recorded (record_model_options) */
    char weights_model[1024]; /* the model options the --weights file records, split (o's pointers refer to it) */
    vt_st_file wfile;         /* the --weights file, read by weights_options for load_model: wfile_open 1 */
    int wfile_open;           /* 1: wfile holds it; -1: it could not be read (werr, said by load_model); 0: unread */
    vt_err werr;
} opts;

typedef enum { O_STR, O_INT, O_LL, O_DBL, O_FLAG, O_SIZE } okind; /* O_SIZE: N or HxW into img_size, img_w */
typedef struct {
    const char *name;
    okind kind;
    size_t off;
    const char *help;
    double lo, hi; /* numeric options: the accepted range (finite values only) */
    int lo_open;   /* 1: the range excludes lo */
    int hi_open;   /* 1: the range excludes hi */
} optdef;

typedef struct {
    const char *name, *usage, *summary, *options;
    int (*run)(opts *o);
    int images; /* 1: positional arguments after MODEL are image files */
} command;

/* The options that configure a model (recorded by training runs). */
#define ARCH_OPTS "--attn --ffn --dims --depths --heads --windows --apply-transform --double-heads "
#define SIZE_OPTS "--img-size --in-chans --num-classes "
/* The options a training checkpoint records (the model's, and the arithmetic it trains in). */
#define RECORDED_OPTS ARCH_OPTS SIZE_OPTS "--dtype "

/* ---- options (options.c) */

/* Every option of every command, and their count. */
extern const optdef optdefs[];
extern const size_t noptdefs;

/* The option spelt name, or NULL. */
const optdef *find_option(const char *name);
/* True when option name (or another spelling of it) was on the command line. */
int given(const opts *o, const char *name);
/* True when the space-separated option list contains name as a whole word. */
int has_word(const char *list, const char *name);
/* Sets option d (spelt a) of command cmd to the text v, checked as the command line is (what: where v comes from, for
 * the error message); -1 on an error. */
int set_option(const char *cmd, const optdef *d, const char *a, const char *v, const char *what, opts *o);
/* Parses argv[2..] into o, accepting only command c's options; -1 on an error (said). */
int parse(const command *c, int argc, char **argv, opts *o);
/* Prints command c's usage, summary and options on stdout. */
void command_help(const command *c);
/* Takes the model options `text` records (a file vitc wrote, path) that the command line does not give, nor skip;
 * lists them in taken (n bytes) when it is not NULL; text is split in place (o's pointers refer to it). */
int take_model_options(opts *o, const char *cmd, char *text, const char *allowed, const char *skip, const char *path,
                       const char *what, char *taken, size_t n);
/* The commands that load --weights: takes the model options the file records (said in a notice), notes a recorded
 * training form for model_cfg, and reads the file once into o->wfile for load_model; 0, or the exit status. */
int weights_options(opts *o, const command *cmd);
/* The value of option d in o as text ("" for a flag; numbers in v, n bytes). */
const char *option_text(const opts *o, const optdef *d, char *v, size_t n);
/* Writes the options among `names` that were given (or taken on --resume) into buf (n bytes), in the form
 * take_model_options reads; -1 if they do not fit or a value holds " --". */
int given_options(const opts *o, const char *names, char *buf, size_t n);

/* ---- messages, threads, the model from the options, output (common.c) */

/* One message line on stderr: "vitc CMD: " (or "vitc: " when cmd is NULL), under mpirun the rank, then the text. */
void say(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* say() of an error the command line makes: printed by rank 0 alone under mpirun. */
void say_once(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Prints fmt with msg (its one %s) as a "vitc: " line on stderr, control characters escaped (msg may hold names
 * from files); returns 1. */
int die(const char *fmt, const char *msg);
/* A required argument not given (what: e.g. "--weights"): prints "vitc: missing WHAT" and returns 2. */
int missing(const char *what);
/* missing() of the image files predict and attention take after MODEL. */
int missing_images(void);
/* An option that can have no effect in command cmd (or an argument it cannot take): says so and returns 2. */
int refuse(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A model name the registry does not know: says so, with the nearest known name where one is near; returns 2. */
int unknown_model(const char *cmd, const char *name);
/* A one-line "vitc: notice: ..." on stderr: an option that changes nothing here. */
void notice(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* One thread setting for the whole process, for OpenMP, OpenBLAS and oneDNN: --threads, else OMP_NUM_THREADS, else
 * the cores it may run on (its CPU affinity; the online cores shared by the node's MPI ranks). */
void set_threads(const opts *o);
/* Under mpirun, once MPI has started: a default thread count divided among the node's ranks that share this rank's
 * CPUs (unbound ranks in a cpuset smaller than the node), with a notice; ranks x threads over those cores warned about. */
void share_threads(const opts *o, const vt_dist *d);
/* Warns when other runnable threads leave fewer cores than vitc's threads (unless OMP_WAIT_POLICY is set, or the
 * process is held to some of the cores): bench and train, whose speed it decides. */
void warn_busy_cores(void);
/* Checks that o->output may be written before any work (not a special file, not one of the inputs; beside 1: the
 * command reads the classes.json beside --weights, which counts as one); 1 after the message. */
int output_ok(const opts *o, int beside);
/* Removes the temporary files of killed vitc writers from output's folder, with a notice when it removed any. */
void remove_stale_temps_beside(const char *output);
/* Every option at its unset value (0, or -1 for the numbers where 0 is a value to give). */
void opts_init(opts *o);
/* Resolves o->model and the options that change it into cfg; 1 on an error, 2 on a usage error (said). */
int model_cfg(opts *o, vt_model_cfg *cfg);
/* Frees the --weights file weights_options read. */
void close_weights(opts *o);
/* The model's parameters, loaded from o->weights or, without it, initialised (--seed); NULL after the message. */
vt_params *load_model(opts *o, const vt_model_cfg *cfg);
/* The arithmetic eval and bench report for c: its --dtype when that ran (ran: some layer or product did), else fp32
 * with what was asked for. */
const char *dtype_label(const vt_model_cfg *c, int ran);
/* Warns on stderr when c asks for int8 or bf16 but u, what the graph that ran used, shows none ran so; 1 then. */
int warn_dtype_fallback(const vt_model_cfg *c, vt_dtype_use u);
/* Prints s as a CSV field (quoted when it holds a comma, a quote or a line break). */
void csv_str(const char *s);
/* Prints s as a JSON string (quoted, escaped; bytes outside valid UTF-8 as U+FFFD). */
void json_str(const char *s);

/* ---- the commands (o: the parsed options; each returns the exit status) */

/* vitc list: every model with params and GMACs (model.c). */
int cmd_list(opts *o);
/* vitc info: one model's shapes, params, MACs and per-block breakdown (model.c). */
int cmd_info(opts *o);
/* vitc init: writes the model's official initialisation (model.c). */
int cmd_init(opts *o);
/* vitc forward: eval-mode logits or stage maps of `input` (model.c). */
int cmd_forward(opts *o);
/* vitc grad: train-mode loss and every parameter's gradient, optionally after AdamW steps (model.c). */
int cmd_grad(opts *o);
/* vitc deploy: training-form weights merged into the deployed form (model.c). */
int cmd_deploy(opts *o);
/* vitc train: a training run, resumed or not, data-parallel under mpirun (train.c). */
int cmd_train(opts *o);
/* vitc eval: loss and top-1/top-5 accuracy on a dataset (infer.c). */
int cmd_eval(opts *o);
/* vitc predict: the top-k classes of image files (infer.c). */
int cmd_predict(opts *o);
/* vitc attention: pictures (and raw maps) of the attention of images (infer.c). */
int cmd_attention(opts *o);
/* vitc bench: throughput of an inference or training step (bench.c). */
int cmd_bench(opts *o);

#endif
