/* Named models: a config = architecture + per-stage description + pretrained (eval) config; a host family = a
 * builder and hooks plus its table of named configs (timm-style registry). */
#ifndef VITC_MODEL_H
#define VITC_MODEL_H

#include "vitc/blocks.h"

#define VT_MAX_STAGES 4

typedef struct vt_model_cfg vt_model_cfg;
typedef struct vt_family vt_family;

/* ImageNet per-channel normalisation of x/255 (timm IMAGENET_DEFAULT_MEAN/STD), as initialisers. */
#define VT_IMAGENET_MEAN {0.485f, 0.456f, 0.406f}
#define VT_IMAGENET_STD {0.229f, 0.224f, 0.225f}

/* How images are prepared for a model (timm's pretrained cfg, `_cfg()`). */
typedef struct vt_pretrained_cfg {
    float mean[3], std[3];     /* normalisation of x/255 per channel */
    float crop_pct;            /* eval resize: shorter side to floor(S / crop_pct), centre crop S (0: timm's 0.875) */
    int squash;                /* 1: both sides resized to floor(S / crop_pct), the aspect not kept (the Swin code
                                  base's Resize((s, s)), FLatten's eval); 0: the shorter side (timm) */
    const char *interpolation; /* resize filter ("bicubic") */
    const char *dataset;       /* "imagenet-1k" (class indices) or "fashion-mnist" (class names) */
} vt_pretrained_cfg;

/* One stage of a network: a run of `depth` blocks of width `dim` (a plain ViT has one stage). */
typedef struct vt_stage_cfg {
    int dim, depth, heads;
    float mlp_ratio;   /* FFN hidden = int(dim · mlp_ratio) */
    int window;        /* attention window (Swin) or stripe width (CSwin); 0: global attention */
    int sr_ratio;      /* spatial reduction of the keys (PVT); 0 or 1: none */
    char attn[24];     /* attention type of the stage's blocks: a name of the attention table (vt_attn_find) */
} vt_stage_cfg;

/* The architecture of a model: everything its graph depends on. */
typedef struct vt_arch_cfg {
    int img_size, in_chans, num_classes; /* img_size: the input's height, and its width unless img_w says otherwise */
    int img_w;         /* a non-square input's width (vt_arch_width; where the weights fit any size); 0: img_size */
    int in_h, in_w;    /* the input's size where it differs from the one the weights are made for (img_size x width):
                        * a model that resizes its position embeddings to the input (vt_model_resizes); 0: that size */
    int patch;         /* patch size of the stem */
    int nstages;       /* stages used in `stages` */
    vt_stage_cfg stages[VT_MAX_STAGES];
    char ffn[24];      /* FFN type of every block: a name of the FFN table (vt_ffn_find) */
    int qkv_bias;
    float ln_eps;
    int class_token;   /* 1: prepend a class token and classify from it; 0: global average pool */
    float drop_path;   /* stochastic depth in train graphs: block i of n drops its residual branches per sample with
                        * probability drop_path·i/(n-1) (timm's linear rule); 0: off */
    int train_form;    /* 1: training form of re-parameterised blocks (cFFN branches); 0: deployed form */
    int aux_head;      /* Refined-ViT: token-labelling aux_head; eval logits = head(cls) + 0.5·max over tokens */
    int cos_reg;       /* Refined-ViT training graphs: the official cos_reg term over the first cos_reg consecutive
                        * pairs of block maps (vt_graph.aux_loss; 0: none; a training graph of too few blocks for it
                        * is refused); a training setting (train and grad --cos-reg) */
    vt_block_opts opts; /* hyper-parameters of the pluggable blocks (0: each block's default) */
    int version;       /* architecture version within a family (PVT: 1 PVT v1, 2 PVTv2); 0: the family's only one */
    int int8;          /* 1: inference graphs run their linear layers in int8 (vt_graph.int8); train graphs ignore it */
    int bf16;          /* 1: every graph runs its large products in bf16 (vt_gemm_plan_bf16) */
    int no_prepack;    /* 1: inference graphs keep no packed or bf16 weight copies (vt_gemm_plan.prepack 0; int8's
                        * quantised weights stay) */
} vt_arch_cfg;

/* A named model. */
struct vt_model_cfg {
    const char *name;
    const char *alias;        /* optional second accepted name (e.g. the official class name) */
    const char *description;
    const vt_family *family;
    vt_arch_cfg arch;
    vt_pretrained_cfg pre;
    char options[512];        /* the architecture options that made it from its named config, spelt as on vitc's
                               * command line (vt_model_configure fills it): weight files record them */
};

/* Options a family may accept beyond the common overrides (vt_family.caps). */
enum {
    VT_CAP_DROP_PATH = 1,       /* stochastic depth (--drop-path) */
    VT_CAP_APPLY_TRANSFORM = 2, /* the Refiner's refine-every-block mode (--apply-transform) */
    VT_CAP_ANY_SIZE = 4,        /* parameter shapes never depend on the image size: `forward` takes it from its input
                                 * (vt_model_any_size; a family may say so per model instead, vt_family.any_size) */
    VT_CAP_FORM_RECORD = 8,     /* the training and deployed forms can share one key set (Next-ViT's merge_bn): weight
                                 * files record their form and a file of the other form is refused (vt_params.form) */
    VT_CAP_WINDOWS = 16,        /* per-stage attention windows or stripe widths (--windows: Swin, CSwin) */
    VT_CAP_LAST_GLOBAL = 32,    /* the last stage attends globally whatever its window (CSwin's last stage): a --windows
                                 * list's entry for it must be the named config's */
    VT_CAP_TUPLE_SIZE = 64,     /* weights of one size, which may be H x W (--img-size HxW): the official class takes
                                 * an (H, W) img_size (Microsoft Swin's PatchEmbed); its check rules on both sides */
    VT_CAP_COS_REG = 128        /* the Refiner's cos_reg loss term over consecutive block maps (--cos-reg) */
};

/* A host network family: its builder, hooks and named configs (one file in src/models/). */
struct vt_family {
    const char *name;
    /* Builds the network on x (B, in_chans, H, W) and returns the logits (B, num_classes). */
    vt_tensor *(*build)(vt_graph *g, const vt_model_cfg *c, vt_tensor *x);
    /* Builds the backbone only and fills the stage maps (B, C_i, H_i, W_i); returns their number, -1 on error; NULL
     * if the family has none. */
    int (*features)(vt_graph *g, const vt_model_cfg *c, vt_tensor *x, vt_tensor *maps[VT_MAX_STAGES]);
    /* Fills the deployed-form store `dep` from the training-form store `train` (re-parameterisation merges); NULL if
     * training and deployed forms are the same. */
    int (*deploy)(const vt_model_cfg *c, const vt_params *train, vt_params *dep, vt_err *e);
    /* 1 if parameter t is excluded from weight decay (timm's no_weight_decay()); NULL: timm's default rule. */
    int (*no_decay)(const vt_tensor *t);
    /* Checks a configured model (image size, stages, options); 0 or -1 with a message. */
    int (*check)(const vt_model_cfg *c, vt_err *e);
    /* Without VT_CAP_ANY_SIZE: 1 if c's parameter shapes do not depend on the image size (PVTv2 but FLatten's);
     * NULL: they do. */
    int (*any_size)(const vt_model_cfg *c);
    /* 1 if c, whose weights depend on the image size, runs inputs of other sizes with them, resizing its position
     * embeddings as the official code does (PVT v1 but FLatten-PVT); NULL: it does not. */
    int (*resizes)(const vt_model_cfg *c);
    /* After --attn changed stage types of `named` into c: sets what the official code derives from a stage's type
     * (FLatten-Swin's window: WINDOW_SIZE for L stages, 7 or 12 for S ones); NULL: nothing depends on the type. */
    void (*retyped)(vt_model_cfg *c, const vt_model_cfg *named);
    /* Writes into buf (n bytes) what stage i's blocks are, where they differ from one another (Next-ViT's NCB and NTB
     * mix), and returns how many of them have attention; NULL: every block has the stage's attention and MLP. */
    int (*stage_blocks)(const vt_model_cfg *c, int i, char *buf, size_t n);
    /* The window or stripe width stage i's blocks run at c's image size (one covering the map shrinks to it, a global
     * branch spans it); NULL: stages[i].window. */
    int (*window_run)(const vt_model_cfg *c, int i);
    unsigned caps;            /* VT_CAP_* options the family accepts */
    const vt_model_cfg *models;
    int nmodels;
};

/* How many blocks of stage i have attention, with buf (n bytes) describing the blocks where they differ within the
 * stage (vt_family.stage_blocks) and empty where every block has the stage's attention and MLP. */
int vt_model_stage_blocks(const vt_model_cfg *c, int i, char *buf, size_t n);

/* The window or stripe width stage i's blocks run at c's image size (vt_family.window_run), which may differ from
 * the --windows value that configured it. */
int vt_model_window_run(const vt_model_cfg *c, int i);

/* Most blocks a model may have over all its stages (vt_model_configure refuses more): the deepest named model has
 * 40, and each block's graph takes memory to build. */
#define VT_MAX_BLOCKS 1024

/* Changes asked of a named config (vitc's options; 0 / NULL / negative keeps the named value). */
typedef struct vt_model_overrides {
    int img_size, in_chans, num_classes;
    int img_w;                /* with img_size: the input width (img_size its height); 0 or img_size: square */
    const char *attn;         /* one attention type for every stage, or a comma-separated list, one per stage */
    const char *ffn;
    int dims[VT_MAX_STAGES], depths[VT_MAX_STAGES], heads[VT_MAX_STAGES]; /* per stage (0 keeps) */
    float drop_path;          /* < 0 keeps; else in [0, 0.99] (1 would scale the kept branches by 1/0) */
    int cos_reg;              /* < 0 keeps (vt_arch_cfg.cos_reg) */
    float crop_pct;           /* <= 0 keeps */
    int train_form, apply_transform, double_heads; /* 1 sets (double_heads: hMHSA's, refused without an hMHSA stage) */
    int windows[VT_MAX_STAGES]; /* per stage: attention window (Swin) or stripe width (CSwin) (0 keeps) */
    int windows_listed;       /* 1: windows came as one value per stage (not one value for every stage) */
    const char *dtype;        /* arithmetic of the linear layers: "fp32", "bf16" or "int8" (NULL keeps fp32) */
    int no_prepack;           /* 1 sets vt_arch_cfg.no_prepack */
    int recorded;             /* 1: heads come from a record (a checkpoint's, vitc_open_with's): a stage whose
                               * attention type runs its own head count (GMA) ignores them, as the run that recorded
                               * them did, where a --heads given is refused */
} vt_model_overrides;

/* Number of registered models. */
int vt_model_count(void);

/* The i-th registered config. */
const vt_model_cfg *vt_model_at(int i);

/* Looks a model up by name or alias (NULL if unknown). */
const vt_model_cfg *vt_model_find(const char *name);

/* "did you mean 'NAME'? " for a name vt_model_find does not know, naming the nearest registered name or alias, or ""
 * when none is near (vt_nearest_try); writes buf (n bytes) and returns it. */
const char *vt_model_hint(const char *name, char *buf, size_t n);

/* Overrides with every field set to "keep". */
vt_model_overrides vt_model_no_overrides(void);

/* Parses list (opt's value, e.g. --dims "32,64,128,256") into v for a model of `stages` stages: positive integers up
 * to 65536, one for every stage or one per stage; -1 with a message naming opt otherwise. */
int vt_model_parse_list(const char *opt, const char *list, int stages, int *v, vt_err *e);

/* Parses an --img-size value, "N" or "HxW" (positive integers up to 2^24), into h and w (0 when square); -1 when
 * malformed (the ranges are vt_model_configure's to check). */
int vt_parse_size(const char *s, int *h, int *w);

/* Removes the blanks from a list value read from a model-options record, in place: an earlier vitc's command line
 * took "2, 2" and recorded it so (the command line now takes digits and commas only). */
void vt_model_unblank_list(char *list);

/* Adds to ov the model options in text, spelt as on vitc's command line and in checkpoints' model-options record
 * ("--num-classes 3 --attn flatten --dims 32,64 --train-form", or --name=value; a value runs to the next " --"; NULL
 * or "": none),
 * for a model of `stages` stages; --attn, --ffn and --dtype values are copied into store (n bytes), which must outlive
 * ov. An option given again replaces its value, as on the command line, unless `once` (a weight file's record, which
 * names each once). -1 with a message on an unknown option or a malformed value (the ranges are vt_model_configure's
 * to check). */
int vt_model_parse_options(const char *text, int stages, vt_model_overrides *ov, char *store, size_t n, int once,
                           vt_err *e);


/* Copies cfg into out with the overrides applied, and checks the result (ranges, the family's rules); out->options
 * then holds ov's architecture options, in the form vt_model_parse_options reads. Every error has e->code
 * VT_E_USAGE. */
int vt_model_configure(const vt_model_cfg *cfg, const vt_model_overrides *ov, vt_model_cfg *out, vt_err *e);

/* 1 if c's parameter shapes do not depend on the image size (its weights fit any input size the model takes). */
int vt_model_any_size(const vt_model_cfg *c);

/* The input width a's graphs are built for: img_w where set (a non-square input), img_size otherwise. */
int vt_arch_width(const vt_arch_cfg *a);

/* 1 if c runs inputs of other sizes than its weights are made for, resizing its position embeddings (vt_family.resizes;
 * the input size then in vt_arch_cfg.in_h, in_w). */
int vt_model_resizes(const vt_model_cfg *c);

/* The input size a's graphs take into h and w: in_h x in_w where set, else img_size x vt_arch_width. */
void vt_arch_input(const vt_arch_cfg *a, int *h, int *w);

/* Writes a's input size into buf (n bytes) as messages give it: "224" (square) or "256x192" (height x width). */
const char *vt_arch_size_text(const vt_arch_cfg *a, char *buf, size_t n);
/* 1 when c has a training form unlike its deployed one (cFFN's branches, Next-ViT's unmerged BatchNorms): the forms
 * --train-form (vt_arch_cfg.train_form) chooses between. */
int vt_model_has_form(const vt_model_cfg *c);

/* Total blocks over the stages. */
int vt_model_depth(const vt_model_cfg *c);

/* The heads each stage of c runs, after --double-heads, as "h0,h1,..." into buf (what weight files record). */
void vt_model_heads(const vt_model_cfg *c, char *buf, size_t n);

/* Drop-path probability of block i of n under c's rate (timm: linspace(0, drop_path, n)[i]). */
float vt_model_drop_path(const vt_model_cfg *c, int i, int n);

/* Builds the model's graph for a batch of B images: declares the input "input" and returns the logits. */
vt_tensor *vt_model_build(vt_graph *g, const vt_model_cfg *c, int B, vt_tensor **input);

/* A training graph's loss: task_loss (the cross-entropy) plus the term the model's build defined (g->aux_loss,
 * Refined-ViT's cos_reg), when it did. */
vt_tensor *vt_model_loss(vt_graph *g, vt_tensor *task_loss);

/* The most pairs of block maps Refined-ViT's cos_reg term may span (--cos-reg). */
enum { VT_COS_REG_MAX = 64 };

/* Builds the backbone for a batch of B images and returns the number of stage maps put in maps (-1 on error, with
 * the message in g->err; a family without stage maps is an error). */
int vt_model_features(vt_graph *g, const vt_model_cfg *c, int B, vt_tensor **input, vt_tensor *maps[VT_MAX_STAGES]);

/* Creates every parameter of the model in P (building a batch-1 graph once), marks weight-decay exclusions with
 * the family's rule and initialises the values with seed. */
int vt_model_init_params(const vt_model_cfg *c, vt_params *P, uint64_t seed, vt_err *e);

/* vt_model_init_params without the random initialisation (values zero, fixed buffers set): for a store whose every
 * value is then loaded or computed (random init of a large model costs more than its forward). */
int vt_model_create_params(const vt_model_cfg *c, vt_params *P, vt_err *e);

/* c in its training form (the form train, grad and training benchmarks run). */
vt_model_cfg vt_model_training_form(const vt_model_cfg *c);

/* Writes into dep the deployed-form parameters of c made from training-form parameters train (the family's
 * re-parameterisation merge); an error if the family has none. */
int vt_model_deploy(const vt_model_cfg *c, const vt_params *train, vt_params *dep, vt_err *e);

/* Parameters and MACs of a model, in total and per scope (block). */
typedef struct vt_model_summary {
    int64_t params, buffers, paper_params, macs; /* paper_params: Linear/Conv weights only (the MSF paper's count) */
    int nscopes;
    char (*scope)[VT_NAMELEN]; /* scope names ("" for the top level) */
    int64_t *scope_params, *scope_macs;
} vt_model_summary;

/* Counts c's parameters and MACs for one image (no weights allocated); free with vt_model_summary_free. A
 * configuration its blocks refuse to build fails with e->code VT_E_USAGE. */
int vt_model_summarize(const vt_model_cfg *c, vt_model_summary *s, vt_err *e);

/* Frees what vt_model_summarize allocated. */
void vt_model_summary_free(vt_model_summary *s);

/* ---- host families (src/models/<family>.c) ---- */
extern const vt_family vt_family_vit;            /* ViT / DeiT (timm names), with any attention and FFN */
extern const vt_family vt_family_simplevit;      /* SimpleViT (MSF paper host) */
extern const vt_family vt_family_refined_vit;    /* Refined-ViT (Refiner paper host) */
extern const vt_family vt_family_groupmixformer; /* GroupMixFormer (GMA paper host) */
extern const vt_family vt_family_swin;           /* Swin, Microsoft/timm layout (fixed size), and FLatten-Swin */
extern const vt_family vt_family_swin_tv;        /* Swin, torchvision layout (any size), and Swin-MSF */
extern const vt_family vt_family_cswin;          /* CSwin and FLatten-CSwin */
extern const vt_family vt_family_pvt;            /* PVT v1 / PVTv2 (+ FLatten, hMHSA + cFFN variants) */
extern const vt_family vt_family_nextvit;        /* Next-ViT (+ hMHSA + cFFN variant), merge_bn deployment */

#endif
