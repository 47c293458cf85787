/* Finite-difference gradient checking of graph builders: analytic backward vs central differences. */
#ifndef VITC_GRADCHECK_H
#define VITC_GRADCHECK_H

#include "test.h"
#include "vitc/graph.h"
#include "vitc/rng.h"

#define GC_MAXX 7

typedef struct gc_case gc_case;
struct gc_case {
    const char *name;
    int nx;                               /* number of operands (created as parameters x0, x1, ...) */
    int ndim[GC_MAXX];
    int shape[GC_MAXX][VT_MAXDIM];
    int nograd[GC_MAXX];                  /* operands excluded from the check (e.g. labels, running stats) */
    vt_tensor *(*build)(vt_graph *g, vt_tensor **x, const gc_case *c); /* returns the op output */
    void (*fill)(float *d, int64_t n, int which, vt_rng *r);           /* optional; default N(0, 1) */
    int ia[8];                            /* free parameters for build */
    float fa[4];
    int eval;                             /* build the graph in eval mode for the forward (still differentiated) */
    int node_rng;                         /* the op draws from an RNG keyed by its node's index (drop-path): the
                                           * check through identity activations (more nodes) cannot compare */
    double eps;                           /* finite-difference step (default 1e-2) */
    double tol;                           /* max |analytic - numeric| / max(max|numeric|, 1e-2) (default 1e-2) */
};

/* Builds the case, checks every operand's gradient at up to 64 sampled elements, records one check per operand;
 * also checks the memory plan's declarations and that the OpenBLAS-only and oneDNN GEMM plans
 * give the default plan's output and gradients (the alternative kernels against the reference ones). */
void gc_run(vt_test *T, const gc_case *c);

/* Two builds of the same operands (a and b share nx, ndim, shape, nograd and fill; only build differs, e.g. a fused
 * op and the plain op chain it replaces), each in an eval graph and in a training graph whose ops see the operands
 * through identity nodes (so gradients the op writes rather than adds run): b's output and every operand's gradient
 * equal a's within tol of their scale (max |b − a| / max(1, max |a|)). */
void gc_compare(vt_test *T, const gc_case *a, const gc_case *b, double tol);

/* gc_run(c), then gc_compare of c against the same operands built by `plain` (the chain c's op replaces, named
 * `name` in messages) within tol. */
void gc_run_vs_plain(vt_test *T, const gc_case *c, vt_tensor *(*plain)(vt_graph *, vt_tensor **, const gc_case *),
                     const char *name, double tol);

/* Relative finite-difference error of parameter t's gradient (already computed by backward) for the loss sum(y·r):
 * max|analytic - numeric| / max(max|numeric|, 1e-2) over about `samples` elements, infinite if a value is not
 * finite; with kinks, each sample's difference is the smallest against the central and the two one-sided
 * differences (a kink such as Hardswish's at ±3 between x - eps and x + eps spoils only one side); *abs_sum gets
 * sum |grad|. */
double gc_param_error(vt_graph *g, vt_tensor *t, const vt_tensor *y, const float *r, int samples, float eps,
                      int kinks, double *abs_sum);

/* max |a - b| / max(max |b|, floor) over n floats (infinite when a holds a non-finite value that b does not). */
double gc_rel_diff(const float *a, const float *b, int64_t n, double floor);

/* Moves every 1-D float tensor of P off its initial value (norm affines, biases and running means by spread·N(0, 1),
 * running variances to 0.5 + U(0, 1)), so eval-mode BatchNorms are no identity; seeded, so two stores agree. */
void gc_shake_norms(vt_params *P, uint64_t seed, float spread);

/* Builds a block on input x in an eval graph (ctx: the caller's case). */
typedef vt_tensor *(*gc_eval_build)(vt_graph *g, vt_tensor *x, const void *ctx);

/* An eval-only fused op against the op chain it replaces: build(x) in an eval graph and in one with ref_kernels
 * (where the builder takes the chain), on the same input (N(0, 1)) and parameters (initialised, then
 * gc_shake_norms); checks that op runs in the first graph and not in the second, and that the outputs agree within
 * tol of their scale (max |a − b| / max(1, max |b|)). */
void gc_compare_eval_fused(vt_test *T, const char *tag, int ndim, const int *xs, gc_eval_build build, const void *ctx,
                           const char *op, double tol);

#endif
