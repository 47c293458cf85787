/* The computation graph: built once per (model, batch, input size), planned into one arena, run many times. */
#ifndef VITC_GRAPH_H
#define VITC_GRAPH_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "vitc/error.h"
#include "vitc/gemm.h"
#include "vitc/rng.h"
#include "vitc/tensor.h"

#define VT_MAXIN 24
#define VT_OP_PARAMS 256 /* bytes available for an op's typed parameter struct inside its node */
#define VT_PAR_MIN 16384 /* elementwise loops over at most this many elements stay on one thread (an OpenMP
                          * region costs more, and a stalled partner thread blocks its barrier) */

typedef struct vt_node vt_node;
typedef struct vt_graph vt_graph;

/* What an op's backward reads of the forward values its node saw (vt_opdef.bwd_reads): VT_READS(bits), with
 * VT_READS_IN(i) for the values of input in[i] and VT_READS_OUT for the node's own output. Saved tensors, scratch,
 * parameters and gradients need no declaration. The planner keeps an activation only while some forward or some
 * declared backward still reads it (graph.c); an op that declares nothing (bwd_reads = 0) keeps every input and
 * its output as long as their producers' backward, the safe default for new ops. tests/gradcheck.c checks every
 * declaration by running backward with the undeclared values replaced by NaN (vt_graph_backward_poisoned). */
#define VT_READS_DECLARED (1u << 31)
#define VT_READS_IN(i) (1u << (i))
#define VT_READS_ALL_IN ((1u << VT_MAXIN) - 1u)
#define VT_READS_OUT (1u << VT_MAXIN)
#define VT_READS(bits) (VT_READS_DECLARED | (unsigned)(bits))

/* An alternative forward kernel of an op (another backend: a library primitive; another dtype). When a graph is
 * finalized, before its memory is planned, each node takes the first of its op's kernels whose prepare(n) returns 1
 * (it decides from the node's shapes, the graph's GEMM plan and thread count, and makes what it needs, e.g. a oneDNN
 * primitive, and its scratch of any dtype with vt_kernel_work), else the op's own forward, the reference; graphs
 * with ref_kernels set take none. The op's forward scratch (vt_node.fws) is planned only for a kernel that says it
 * uses it (ref_scratch); a kernel that hands a run to the reference calls vt_node_fallback first. A kernel computes
 * the reference's result to float rounding (every gradient-check case runs both ways, tests/gradcheck.c) and writes
 * what the op's backward reads (saved tensors) as the reference does; the backward is the op's. Int8 kernels, taken only by eval graphs with
 * vt_graph.int8 set, compute a documented quantised result instead (tests/test_int8.c). */
typedef struct vt_kernel {
    const char *name;               /* "<op>.<backend>", e.g. "linear.onednn_matmul" (profiles show it) */
    int (*prepare)(vt_node *n);     /* 1: runs n (ready), 0: not for this node or machine */
    void (*forward)(vt_node *n);
    int ref_scratch;                /* 1: forward also uses the op's forward scratch n->fws */
} vt_kernel;

/* What an op's time goes to, for the profile's split (vt_graph_profile_split): GEMM library calls around light
 * epilogues (linear, matmul, convolutions but the depthwise), GEMMs fused with other work on their tiles (the
 * attention ops, the Refiner's DLA, GroupMixFormer's aggregators), or neither (memory-bound: norms, activations,
 * layout, depthwise convs). */
typedef enum { VT_OP_OTHER = 0, VT_OP_GEMM, VT_OP_FUSED, VT_OP_KINDS } vt_op_kind;

/* An op's kernels: forward writes n->out (and saved tensors); backward accumulates (+=) into input grads (or writes
 * those of the slots in n->grad_fresh) and reads only n->in[], n->out, its saved and scratch tensors (never a tensor
 * reached some other way: the planner could not see that read), and of n->in[] / n->out only the values bwd_reads
 * declares. */
typedef struct vt_opdef {
    const char *name;
    void (*forward)(vt_node *n);
    void (*backward)(vt_node *n);
    unsigned bwd_reads; /* VT_READS(...); 0: undeclared (everything kept, as if all were read) */
    const vt_kernel *const *kernels; /* alternative forwards, preferred first, NULL-terminated (NULL: none) */
    vt_op_kind kind;
} vt_opdef;

struct vt_node {
    const vt_opdef *op;
    vt_graph *g;
    vt_tensor *in[VT_MAXIN];
    int nin;
    vt_tensor *out;
    vt_tensor *save[4]; /* VT_SAVED: values kept from forward for backward */
    vt_tensor *fws;     /* VT_WORK: forward scratch (NULL if none) */
    vt_tensor *bws;     /* VT_WORK: backward scratch (NULL if none) */
    vt_tensor *kws;     /* VT_WORK: the chosen kernel's forward scratch (vt_kernel_work; NULL if none) */
    _Alignas(max_align_t) unsigned char params[VT_OP_PARAMS]; /* the op's typed parameters: see VT_OP_P */
    int64_t macs;       /* multiply-adds of one forward run of this node */
    int bwd_twice;      /* set by the builder: 1 where each forward multiply-add multiplies two values that both take a
                         * gradient (attention's q·kᵀ and p·v, also on one packed qkv input): the backward runs two for
                         * it once any input needs a gradient (vt_graph_train_macs); 0: one per input side that needs
                         * one, as a linear's */
    vt_op_kind kind;    /* what its time goes to, for the profile: op->kind unless the builder knows better (a
                         * depthwise conv2d makes no GEMM call: VT_OP_OTHER) */
    int scope;          /* index into the graph's scope names (per-block breakdown) */
    int index;
    vt_tensor *xout;    /* an opt-in second output (vt_node_extra_output), e.g. exported attention probabilities */
    const vt_kernel *kern; /* the forward kernel chosen at finalize (vt_kernel); NULL: the op's own forward */
    int constant;       /* eval graphs (set at finalize): every input is a parameter, a buffer or a constant node's
                         * output, so the output changes only with the parameters (see vt_graph.const_gen) */
    unsigned grad_sets; /* set by the builder: input slots (bit i: in[i]) whose gradient the backward can write (=)
                         * instead of adding to (+=), covering every element */
    unsigned grad_fresh; /* set by the engine before each backward run: the slots of grad_sets whose gradient this
                          * node writes first (it was not zeroed, memset being ~7% of a ViT step): the backward must
                          * write every element of them rather than add */
    unsigned rg_in;      /* input slots that required a gradient when they joined the node (the op sized its
                          * backward scratch by them); finalize refuses a graph where one has changed since */
};

/* How an exported map is given (vt_attn_map.form). */
enum {
    VT_MAP_FULL = 0, /* t holds the map */
    VT_MAP_SOFTMAX,  /* softmax_j(scale·s_ij) of the factors' products s_ij = Σ_c q(i, c)·k(j, c) */
    VT_MAP_LINEAR,   /* s_ij / (Σ_j s_ij + eps) (linear attention's implied weights; relu: ReLU on q and k first) */
    VT_MAP_DOT       /* scale·s_ij, unnormalised */
};

/* An attention map a block exported (vt_graph_export_map) from its own intermediates, when the graph was built with
 * export_maps set: a (B, H, N, M) map over N queries (lead tokens, then a gh × gw grid) and M keys (klead, kh × kw),
 * held in t (VT_MAP_FULL) or given by factors q, k that the caller multiplies (linear attention never forms it). */
typedef struct vt_attn_map {
    char name[VT_NAMELEN]; /* the block's prefix and the view, e.g. "blocks.3.attn" or "blocks.3.attn.refined" */
    char view[32];         /* the view alone ("" for a block's plain map) */
    int form;              /* VT_MAP_* */
    vt_tensor *t;          /* VT_MAP_FULL: (B, H, N, M) */
    vt_tensor *q, *k, *kbias; /* factors (and an optional term added to k) */
    int64_t qoff, koff, kboff;       /* the factors' first elements, in floats from their data */
    int64_t qst[4], kst[4], kbst[4]; /* their strides in floats over (batch, head, token, channel) */
    int batch, heads, n, m, d; /* factors: batch entries, H, N, M and the channels c summed over */
    float scale, eps;
    int relu;
    int lead, gh, gw;      /* queries */
    int px;                /* > 0: the query grid covers the image's top-left gh·px × gw·px pixels (vt_graph.map_px) */
    int klead, kh, kw;     /* keys */
    int kpool;             /* > 0: key j pools query-grid tokens [j·kpool, (j+1)·kpool) in raster order (Next-ViT) */
    int win_h, win_w, win_sh, win_sw; /* > 0: batch entries are the gh × gw windows of one win_h × win_w map cut by
                           * vt_window_partition with shift (win_sh, win_sw) (Swin); queries and keys are a window */
    int split;             /* > 0: heads [0, split) and [split, H) are two kinds (hMHSA: computed, hallucinated) */
    int probs;             /* 1: rows are probabilities (sum to 1); 0: other scores (the Refiner's refined maps) */
} vt_attn_map;

struct vt_graph {
    vt_params *P;
    int threads;        /* the threads its kernels run on: vt_threads_usable(omp_get_max_threads()) when the graph
                         * was created; builders size per-thread scratch for it and vt_graph_forward / backward run
                         * with it (OpenMP's dynamic adjustment off) */
    int training;       /* 1: train mode (BatchNorm batch stats, drop-path), activations kept for backward */
    vt_err err;         /* first build error; later builder calls become no-ops */
    vt_node **nodes;
    int nn, ncap;
    vt_tensor **tens;   /* tensors owned by the graph (activations, inputs, saved, work) */
    int nt, tcap;
    char **scopes;
    int nscopes, scap, cur_scope;
    vt_name_index scope_index; /* of scopes by name */
    unsigned char *arena; /* every planned tensor, each at a 64-byte aligned offset */
    int64_t arena_bytes;
    vt_tensor *loss;    /* scalar whose gradient is seeded with 1 by vt_graph_backward */
    int fwd_ready;      /* a training graph's forward has run since its last backward (which needs one) */
    vt_tensor *aux_loss; /* training graphs: a term of the loss the model itself defines (Refined-ViT's cos_reg),
                          * which the trainer adds to its cross-entropy; NULL: none */
    uint64_t seed;      /* random masks (drop-path) are drawn from (seed, node index); the trainer sets it per step */
    int finalized;
    double *node_s;     /* when non-NULL: seconds spent in each node (forward + backward), accumulated */
    double *node_gemm_s; /* with node_s: of those, the seconds a fused node (VT_OP_FUSED) spent in vt_gemm calls (its
                          * threads' time in them over the thread count) */
    vt_gemm_plan gemm;  /* GEMM library dispatch for this graph's ops (the machine, VITC_GEMM read at creation) */
    void (*bwd_hook)(void *ctx, int node); /* when non-NULL, vt_graph_backward calls it after the backward step of
                         * each node (run or skipped), in descending node order: gradients that only nodes >= node
                         * write are then final (data-parallel training starts their allreduce there, dist.c) */
    void *bwd_hook_ctx; /* its first argument */
    void (*allsum)(void *ctx, double *v, int n); /* set before building a training graph for data-parallel training
                         * with synchronised BatchNorm (torch's SyncBatchNorm): sums v[0..n) over the replicas, in
                         * place, on each of them. BatchNorms with batch statistics then normalise over every replica's
                         * batch and sum their backward's per-channel sums so too (their own parameters' gradients stay
                         * this replica's, which the trainer averages); builders pick ops that support it. Every replica
                         * runs the same graph, so the calls match. NULL: each replica's own batch */
    void *allsum_ctx;   /* its first argument */
    int replicas;       /* with allsum: how many replicas it sums over, each holding a batch of this graph's shape */
    int ref_kernels;    /* set before finalize: every node runs its op's own (reference) forward, no vt_kernel; for
                         * tests comparing the kernels */
    int keep_all;       /* set before finalize: plan as if no op declared bwd_reads (every activation kept until its
                         * producer's backward, the plan before declarations existed); for comparisons and tests */
    int int8;           /* set before finalize (vt_model_build does, from the model's arch.int8): an inference graph
                         * runs its linear layers whose weights are parameters in int8 (linear.onednn_int8, vt_gemm_q8:
                         * the weights are quantised at the first forward and again after vt_params_changed) */
    int export_maps;    /* set before building: blocks export their attention maps (vt_graph_export_map); 0 costs
                         * nothing */
    int map_px;         /* set by single-grid hosts (ViT, Refined-ViT) before their blocks, by Swin and PVT before each
                         * stage's: a token is px × px pixels, so a grid of unpadded patch convs covers the image's
                         * top-left grid·px pixels (other sizes lose the rest); exported maps take it as
                         * vt_attn_map.px */
    int all_tokens;     /* set before building: every block computes every token's output. Otherwise a class-token
                         * ViT's last block computes only the class token's row past its keys and values (the one row
                         * its head reads; same result); model summaries set it so their MACs are the model's */
    vt_attn_map **maps; /* the exported maps, in build order */
    int nmaps, mapcap;
    uint64_t const_gen; /* eval graphs: the parameters' generation (vt_params.gen) the constant nodes' outputs were
                         * computed at, plus one (0: never); vt_graph_forward skips those nodes while it holds */
};

/* The threads a parallel region asked for `want` gets: at most OMP_THREAD_LIMIT's, 1 when OMP_MAX_ACTIVE_LEVELS is 0
 * (OpenBLAS's threaded sgemm waits forever for threads a smaller team does not have). */
int vt_threads_usable(int want);

/* The CPUs this process may run on: its affinity mask (taskset, a cpuset, mpirun's binding), or the CPUs of OpenMP's
 * places where those are more (OMP_PROC_BIND / OMP_PLACES pin the initial thread to one place), where that holds
 * fewer than the online cores, else the online cores; at least 1. */
int vt_cpus_usable(void);

/* The calling thread's CPU affinity mask (bytes in *bytes, malloc'd: free it), sized for the configured CPUs and grown
 * while the kernel says it is too small (a fixed cpu_set_t holds 1,024 CPUs only); NULL where it cannot be read. */
unsigned char *vt_cpus_mask(size_t *bytes);

/* The calling thread's OpenMP settings that vt_threads_enter changes. */
typedef struct {
    int threads, dynamic;
} vt_threads_env;

/* Makes the calling thread's parallel regions run exactly `threads` threads (a usable count; OpenMP's dynamic
 * adjustment off: a smaller team hangs OpenBLAS's threaded sgemm); returns the settings vt_threads_leave restores. */
vt_threads_env vt_threads_enter(int threads);
/* Restores the settings vt_threads_enter returned. */
void vt_threads_leave(vt_threads_env prev);

/* Creates an empty graph over the parameter store P (not owned) in train (1) or eval (0) mode, run on the calling
 * thread's vt_threads_usable(omp_get_max_threads()) threads (vt_graph.threads); its GEMM library
 * is chosen per call (vt_gemm_choose) unless the environment variable VITC_GEMM=openblas|onednn|auto says otherwise. */
vt_graph *vt_graph_new(vt_params *P, int training, vt_err *e);

/* Frees the graph and its arena (not the parameter store). */
void vt_graph_free(vt_graph *g);

/* Declares a graph input of the given shape, filled by the caller after vt_graph_finalize. */
vt_tensor *vt_input(vt_graph *g, const char *name, int ndim, const int *shape);

/* Returns the parameter `name` (created in the store with init rule `init` if absent; shape checked). */
vt_tensor *vt_param(vt_graph *g, const char *name, int ndim, const int *shape, vt_init init);

/* Returns the non-learnable buffer `name` (e.g. BatchNorm running stats), created if absent. */
vt_tensor *vt_buffer(vt_graph *g, const char *name, int ndim, const int *shape, vt_init init);

/* Returns the buffer `name` whose values are fixed by the architecture (e.g. Swin's relative_position_index): created
 * with a copy of values (numel floats) if absent; a weights file must hold the same values (vt_params_load). */
vt_tensor *vt_buffer_fixed(vt_graph *g, const char *name, int ndim, const int *shape, const float *values);

/* 1 when t's values depend on parameters and buffers only (t is one, a view of one, or made from them by nodes of
 * g, at most 8 deep), so that an eval graph computes the same values at every forward; 0 otherwise. */
int vt_graph_is_constant(const vt_graph *g, const vt_tensor *t);

/* Sets the scope (e.g. "blocks.3") that later nodes are attributed to in the MAC breakdown. */
void vt_scope(vt_graph *g, const char *scope);

/* Marks t as an output read after vt_graph_forward (keeps its memory live to the end). */
void vt_graph_output(vt_graph *g, vt_tensor *t);

/* When g->export_maps is set: records a copy of m (its name made unique with a suffix if needed) and marks its
 * tensors (t, or q, k, kbias) graph outputs, so the planner keeps them; otherwise does nothing. Returns -1 (error set) when out of memory. */
int vt_graph_export_map(vt_graph *g, const vt_attn_map *m);

/* Marks the scalar t as the loss that vt_graph_backward differentiates. */
void vt_graph_set_loss(vt_graph *g, vt_tensor *t);

/* Plans memory and allocates the arena; returns -1 with the first build error if any. */
int vt_graph_finalize(vt_graph *g, vt_err *e);

/* Runs every node's forward kernel in order (subnormal floats flushed to zero and rounding to nearest in every
 * thread, the caller's included, which keeps them: see graph.c); an inference graph skips its constant nodes (inputs
 * all parameters or constants) until g->P's values change (vt_params_changed). */
void vt_graph_forward(vt_graph *g);

/* Runs backward from the loss (its gradient seeded to 1; floating-point settings as vt_graph_forward); parameter grads
 * accumulate (+=). Once per forward: the plan lets backward overwrite what only it reads, so a second backward would
 * read garbage: -1 with g->err set instead (also for a graph built without training). */
int vt_graph_backward(vt_graph *g);

/* vt_graph_backward, except that while each node's backward runs, every input and output value it does not declare
 * reading (vt_opdef.bwd_reads) is replaced by NaN (and restored after), and the gradients it writes first
 * (vt_node.grad_fresh) start as NaN: the gradients equal vt_graph_backward's exactly when the declarations cover what
 * the kernels read and those backwards write every element. For tests, on a train graph finalized with keep_all
 * set; -1 (error set) otherwise or if out of memory. */
int vt_graph_backward_poisoned(vt_graph *g, vt_err *e);

/* Starts accumulating per-node run times (see vt_graph_print_profile) on a finalized graph; -1 (error set) on one not
 * finalized or out of memory. */
int vt_graph_enable_profile(vt_graph *g, vt_err *e);

/* Prints to f (NULL: nothing) the accumulated time per op type (per kernel where a vt_kernel ran), largest first, as a share of the
 * total with the op's kind (fused ops: and their GEMM calls' share), the split by op kind (vt_graph_profile_split),
 * then the 12 slowest nodes (scope, kernel, first input's and output's shapes). */
void vt_graph_print_profile(const vt_graph *g, FILE *f);

/* The accumulated time's fractions by op kind: share[VT_OP_GEMM], share[VT_OP_FUSED], share[VT_OP_OTHER] (zeros when
 * profiling is off or nothing ran). */
void vt_graph_profile_split(const vt_graph *g, double share[VT_OP_KINDS]);

/* The fraction of the accumulated time that fused ops (VT_OP_FUSED) spent inside their vt_gemm calls (their threads'
 * time in those calls over the thread count; part of share[VT_OP_FUSED]); 0 when profiling is off. */
double vt_graph_profile_fused_gemm(const vt_graph *g);

/* Total multiply-adds of one forward run. */
int64_t vt_graph_macs(const vt_graph *g);

/* Multiply-adds of one forward and backward run: each node's forward, and for its backward once more for its first
 * input's gradient and once for its other inputs' (a weight's), each where needed: a first layer, whose input needs
 * no gradient, 2x its forward in all, a layer of frozen weights 2x too, most 3x; a node of products of two gradient
 * takers (vt_node.bwd_twice: attention) 3x once any input needs a gradient. */
int64_t vt_graph_train_macs(const vt_graph *g);

/* Bytes of the planned arena (activations, saved values, gradients, scratch). */
int64_t vt_graph_arena_bytes(const vt_graph *g);

/* ---- for op implementations ---- */

/* The typed parameter struct T of node n (each op defines its own struct, e.g. `linear_p`, written by its builder
 * and read by its kernels); a struct larger than VT_OP_PARAMS bytes fails to compile. */
#define VT_OP_P(n, T) ((T *)(void *)((n)->params + 0 * sizeof(char[sizeof(T) <= VT_OP_PARAMS ? 1 : -1])))

/* Records a build error naming the op (returns NULL so builders can `return vt_fail(...)`). */
vt_tensor *vt_fail(vt_graph *g, const char *op, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* True when the builder must stop: a previous error, or a NULL input among the n given. */
int vt_bad(vt_graph *g, int n, ...);

/* New activation tensor of the given shape (planned). */
vt_tensor *vt_new_act(vt_graph *g, int ndim, const int *shape);

/* New node with op `op`, inputs in[0..nin), output `out`; out->requires_grad follows the inputs. */
vt_node *vt_new_node(vt_graph *g, const vt_opdef *op, vt_tensor **in, int nin, vt_tensor *out);

/* Appends input t to node n (built earlier, for epilogue fusion); returns -1 (error set) if n is full. */
int vt_node_add_input(vt_node *n, vt_tensor *t);

/* A second output of node n (shape given, no gradient), planned as a graph output and written by n's forward. */
vt_tensor *vt_node_extra_output(vt_node *n, int ndim, const int *shape);

/* Attaches a saved tensor (kept for backward) of `numel` floats to node slot `slot`. */
vt_tensor *vt_node_save(vt_node *n, int slot, int64_t numel);

/* Attaches forward (which = 0) or backward (which = 1) scratch of `numel` floats. */
vt_tensor *vt_node_work(vt_node *n, int which, int64_t numel);

/* For a kernel's prepare: forward scratch of numel elements of dtype for it (n->kws), planned only if the kernel is
 * taken. */
vt_tensor *vt_kernel_work(vt_node *n, vt_dtype dtype, int64_t numel);

/* For a kernel's forward about to run the op's reference forward instead (for good when for_good: a library call
 * failed; else this run): gives the node its forward scratch if the plan left it out (heap memory, freed with the
 * graph). 0: the reference may run; -1: out of memory, the node's output is set to NaN instead. */
int vt_node_fallback(vt_node *n, int for_good);

/* Shape of x with `axis` removed (into shape; returns its ndim, or -1 if axis is out of range), and the products
 * of the dims before (*outer) and after (*inner) the axis, for reductions over one axis. */
int vt_reduce_shape(const vt_tensor *x, int axis, int *shape, int64_t *outer, int64_t *inner);

/* A reshape view of x (same data and grad, new shape; numel must match). */
vt_tensor *vt_reshape(vt_graph *g, vt_tensor *x, int ndim, const int *shape);

/* A view of the contiguous elements [off, off + numel(shape)) of x (their data and grad, no copy) with the given
 * shape; they must lie inside x. */
vt_tensor *vt_view_range(vt_graph *g, vt_tensor *x, int64_t off, int ndim, const int *shape);

#endif
