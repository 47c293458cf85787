/* Tensors (row-major, contiguous, up to VT_MAXDIM dims; float32 unless a kernel's scratch says otherwise) and the
 * parameter store. */
#ifndef VITC_TENSOR_H
#define VITC_TENSOR_H

#include <stdint.h>

#include "vitc/error.h"

#define VT_MAXDIM 5
#define VT_NAMELEN 128
/* Elements of one tensor at most (INT_MAX, 8 GiB of floats): builders multiply dims in int (B·N, H·W, ...), and every
 * such product stays exact. VT_NUMEL_LIMIT_MSG words it in errors (its %d takes VT_MAX_NUMEL). */
#define VT_MAX_NUMEL 2147483647
#define VT_NUMEL_LIMIT_MSG "the engine's limit of %d elements per tensor (8 GiB)"

typedef enum {
    VT_ACT = 0,  /* activation produced by a node (planned in the graph arena) */
    VT_INPUT,    /* graph input filled by the caller (planned, live for the whole run) */
    VT_PARAM,    /* learnable parameter (owned by a vt_params store) */
    VT_BUFFER,   /* non-learnable state such as BatchNorm running stats (owned by a vt_params store) */
    VT_SAVED,    /* per-node values kept from forward for backward (planned) */
    VT_WORK      /* per-node scratch, live only while its node runs (planned) */
} vt_kind;

/* The element type of a tensor. Parameters, activations, gradients and saved values are VT_F32; a kernel's own
 * scratch may be another type (vt_kernel_work), planned by its byte size (vt_dtype_size). */
typedef enum {
    VT_F32 = 0, /* float (data) */
    VT_U8       /* uint8_t, e.g. the int8 kernel's quantised input (vt_tensor_u8) */
} vt_dtype;

/* Bytes of one element of dtype d (0 when out of range). */
int vt_dtype_size(vt_dtype d);

/* How a parameter is initialised by vt_params_init (the official init of each model). */
typedef enum {
    VT_INIT_ZERO = 0, VT_INIT_ONE, VT_INIT_CONST, VT_INIT_NORMAL, VT_INIT_TRUNC_NORMAL, VT_INIT_UNIFORM,
    VT_INIT_FIXED /* buffers whose values are part of the architecture (set when created; a loaded file must agree) */
} vt_init_kind;

typedef struct vt_init {
    vt_init_kind kind;
    float a; /* const value, std (normal), or bound (uniform: U(-a, a)) */
} vt_init;

typedef struct vt_tensor {
    char name[VT_NAMELEN];
    int ndim;
    int shape[VT_MAXDIM];
    int64_t numel;
    vt_dtype dtype;        /* VT_F32 but for kernel scratch (vt_kernel_work) */
    float *data;           /* its first element (a VT_U8 tensor's are read through vt_tensor_u8) */
    float *grad;           /* NULL when no gradient flows here */
    vt_kind kind;
    int requires_grad;     /* params: 1 (0: frozen, set before any graph is built on it); activations: 1 if any
                            * input requires grad */
    int no_decay;          /* params: excluded from weight decay (set by the model family's rule) */
    int paper_count;       /* params: counted by a paper's "Linear/Conv weights only" convention */
    int is_i64;            /* buffers: stored as I64 in files (BatchNorm num_batches_tracked) */
    vt_init init;          /* params/buffers: initialisation rule */
    struct vt_tensor *view_of; /* views (vt_reshape, vt_view_range) alias this tensor's memory */
    int64_t view_off;      /* views: elements from view_of's first one to this view's (0 for a reshape) */
    /* engine-private planning fields */
    int prod, last_use, grad_start, is_output;
    int bwd_last;          /* the last step at which a backward reads this root's values (-1: none; set by finalize) */
    int consumed;          /* fused into a later node's epilogue (vt_residual): may not be used again */
    int unplanned;         /* scratch the chosen kernel does not use: no memory (NULL data) unless a fallback asks */
    int heap;              /* data is its own allocation (a fallback's scratch; freed with the graph) */
    int scope;             /* params: scope index in the graph that created them (per-block breakdown) */
    int64_t off, goff;
} vt_tensor;

/* The bytes of a VT_U8 tensor t (its data, typed). */
static inline uint8_t *vt_tensor_u8(const vt_tensor *t) { return (uint8_t *)(void *)t->data; }

/* Number of elements of a shape (0 dims -> 1). */
int64_t vt_shape_numel(int ndim, const int *shape);

/* Writes "(a, b, c)" for t's shape into buf; returns buf. */
const char *vt_shape_str(const vt_tensor *t, char *buf, int len);

/* 1 when t is not NULL and has nd (<= 4) dims equal to d0, d1, ... (the unused ones ignored), else 0. */
int vt_has_shape(const vt_tensor *t, int nd, int d0, int d1, int d2, int d3);

/* Sets n floats at p to zero (in parallel when n is large). */
void vt_zero(float *p, int64_t n);

/* The index of the first NaN or Inf among n floats at p, or -1 when all are finite. */
int64_t vt_first_nonfinite(const float *p, int64_t n);

/* s[c] += Σ_r y[r·C + c] over R rows of C floats (a bias gradient): each thread owns a block of columns. */
void vt_add_col_sums(const float *y, int64_t R, int C, float *s);

/* Root tensor of a view chain (t itself when not a view). */
vt_tensor *vt_root(vt_tensor *t);

/* Elements from the root of t's view chain to t's first (0 when not a view). */
int64_t vt_root_offset(const vt_tensor *t);

/* An open-addressed index of named entries (a parameter store's tensors, a graph's scopes): slot[i] holds an
 * entry's position + 1 (0: empty), slots is a power of two kept over twice the entries, probed linearly from the
 * name's FNV-1a hash. name_of(ctx, k) is entry k's name. */
typedef const char *(*vt_name_of)(const void *ctx, int k);
typedef struct {
    int *slot;
    int slots;
} vt_name_index;

/* Entry position of `name` in the index, -1 if absent. */
int vt_name_index_find(const vt_name_index *x, const char *name, vt_name_of name_of, const void *ctx);
/* Adds entry k (its name absent) after making room for k + 1 entries (entries 0..k-1 re-inserted when the table
 * grows); -1 with the error set if out of memory. */
int vt_name_index_add(vt_name_index *x, int k, vt_name_of name_of, const void *ctx, vt_err *e);
/* Frees the index's table. */
void vt_name_index_free(vt_name_index *x);

/* The learnable parameters and buffers of a model, shared by all graphs built on it. */
typedef struct vt_params {
    vt_tensor **t;
    int n, cap;
    vt_name_index index; /* of t by name */
    int shapes_only; /* 1: record names and shapes only, allocate no data (for counting) */
    const char *form; /* "training" or "deployed" for a model whose two forms share their keys (Next-ViT): recorded in
                       * files by vt_params_save and checked by vt_params_load; NULL: not recorded */
    int reparam;      /* 1: the model has re-parameterised blocks (cFFN), whose training form holds `.rep.` branches
                       * and whose deployed form their merges: the key set tells the forms apart */
    char heads[64];   /* the heads each stage runs ("3" or "2,4,8,16"), which no shape shows: recorded and checked
                       * like form; "": not recorded */
    char windows[64]; /* the attention window or stripe width of each stage of a model with them ("1,2,7,7"), which
                       * CSwin's shapes do not show: recorded and checked on loading (not on --init-from); "": none */
    char attn[128];   /* each stage's attention as weight files record it (vt_attn_record_name: "msf_g2_block", or
                       * "mhsa,mhsa,flatten,flatten"), whose grouped projections' channel order no shape shows: recorded
                       * and checked on loading; "": none */
    const char *model; /* the named model it was created for, recorded in weight files (VT_MODEL_KEY); NULL: none */
    char options[512]; /* the options that changed it from that model (vt_model_cfg.options), recorded with it */
    int folder;        /* 1: trained on an image folder (VT_DATA_KEY "folder", kept by loading and writing it): its
                        * classes are the folder's, not those of the model's dataset */
    long long epoch;   /* > 0: the training epoch (from 1) whose weights these are, recorded (VT_EPOCH_KEY) in a run's
                        * weights_best, whose resume checks it against its checkpoint; 0: not recorded */
    uint64_t gen;     /* changes whenever values are written (vt_params_changed): inference graphs keep copies of
                       * constant weights (packed, quantised) and the outputs of constant nodes (folded BatchNorms,
                       * position embeddings), and renew them only when it moved */
} vt_params;

/* Marks P's values as changed (vitc's own writers do it: loads, inits, optimiser and EMA steps, merges); code that
 * writes parameter or buffer values itself calls it before the next forward of a graph built on P. */
void vt_params_changed(vt_params *P);

/* Creates an empty store. */
vt_params *vt_params_new(vt_err *e);

/* The first tensor of P whose values hold a NaN or Inf (its element's index in *at), or NULL when all are finite. */
const vt_tensor *vt_params_first_nonfinite(const vt_params *P, int64_t *at);

/* Copies what src records about its model (form, reparam, heads, windows, model, options) into dst, not its tensors. */
void vt_params_copy_records(vt_params *dst, const vt_params *src);

/* Frees the store and every tensor in it. */
void vt_params_free(vt_params *P);

/* Finds a tensor by name (NULL if absent). */
vt_tensor *vt_params_find(const vt_params *P, const char *name);

/* Adds (or returns the existing, shape-checked) parameter or buffer with zeroed data (none if shapes_only). */
vt_tensor *vt_params_add(vt_params *P, const char *name, vt_kind kind, int ndim, const int *shape, vt_init init,
                         vt_err *e);

/* Initialises every tensor from its init rule with a deterministic RNG seeded by seed (the same values on any number
 * of threads). */
void vt_params_init(vt_params *P, uint64_t seed);

/* Sum of elements of all tensors of the given kind (VT_PARAM or VT_BUFFER). */
int64_t vt_params_count(const vt_params *P, vt_kind kind);

/* Sum of elements of params flagged paper_count (a paper's Linear/Conv-weights-only convention). */
int64_t vt_params_count_paper(const vt_params *P);

/* Allocates (zeroed) gradients for every parameter with requires_grad that has none yet; a frozen parameter keeps
 * none, so no backward writes one for it (ops size their backward scratch by requires_grad). -1 when a frozen
 * parameter has a gradient already (frozen after one was made: freeze before building graphs or an optimiser). */
int vt_params_alloc_grads(vt_params *P, vt_err *e);

/* Sets every parameter gradient to zero. */
void vt_params_zero_grad(vt_params *P);

#endif
