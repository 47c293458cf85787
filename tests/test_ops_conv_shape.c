/* Convolution, pooling and shape ops: finite-difference gradient checks on edge shapes (run at several OpenMP
 * thread counts so both the image-parallel and the BLAS-parallel conv paths are covered), forward values
 * against naive double-precision references, MAC counts, and build-time shape errors. */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "gradcheck.h"
#include "vitc/blocks.h"
#include "vitc/ops.h"

/* ---- builders for gc_case ---- */

static vt_tensor *b_conv(vt_graph *g, vt_tensor **x, const gc_case *c) {
    return vt_conv2d(g, x[0], x[1], c->nx > 2 ? x[2] : NULL, c->ia[0], c->ia[1], c->ia[2]);
}
static vt_tensor *b_convn(vt_graph *g, vt_tensor **x, const gc_case *c) {
    return vt_conv2d_nhwc(g, x[0], x[1], c->nx > 2 ? x[2] : NULL, c->ia[0], c->ia[1], c->ia[2]);
}
/* x + conv(x) (Cout = C, a "same" conv): x's gradient gets two terms, so a backward that writes instead of adding
 * fails */
static vt_tensor *b_convn_res(vt_graph *g, vt_tensor **x, const gc_case *c) {
    return vt_add(g, x[0], b_convn(g, x, c));
}
/* conv(x, w) + conv(conv(x, w), w) (Cout = C): w's gradient sums two convs' terms, so a weight gradient that
 * writes instead of adding fails */
static vt_tensor *b_convn_twice(vt_graph *g, vt_tensor **x, const gc_case *c) {
    vt_tensor *y = b_convn(g, x, c);
    return vt_add(g, y, vt_conv2d_nhwc(g, y, x[1], NULL, c->ia[0], c->ia[1], c->ia[2]));
}
static vt_tensor *b_conv_res(vt_graph *g, vt_tensor **x, const gc_case *c) {
    return vt_add(g, x[0], b_conv(g, x, c));
}
/* conv(x) + conv(x), two nodes: the second dX into x's gradient is added, for any stride */
static vt_tensor *b_conv_dup(vt_graph *g, vt_tensor **x, const gc_case *c) {
    return vt_add(g, b_conv(g, x, c), b_conv(g, x, c));
}
static vt_tensor *b_dwn(vt_graph *g, vt_tensor **x, const gc_case *c) {
    return vt_dwconv_nhwc(g, x[0], x[1], c->nx > 2 ? x[2] : NULL, c->ia[0]);
}
/* in a train graph: the depthwise conv and the GELU op */
static vt_tensor *b_dwn_gelu(vt_graph *g, vt_tensor **x, const gc_case *c) {
    return vt_dwconv_nhwc_gelu(g, x[0], x[1], x[2], c->ia[0]);
}
/* channels [ia[1], ia[1] + C) of x0, pad ia[0], bias x2, plus x3 */
static vt_tensor *b_dwn_ex(vt_graph *g, vt_tensor **x, const gc_case *c) {
    return vt_dwconv_nhwc_ex(g, x[0], c->ia[1], x[1], x[2], c->ia[0], x[3]);
}
/* b_dwn_ex (every channel, same size) + x0 + x3: x0's and x3's gradients get a second term, so a backward that
 * writes where it must add fails */
static vt_tensor *b_dwn_ex_shared(vt_graph *g, vt_tensor **x, const gc_case *c) {
    return vt_add(g, vt_add(g, b_dwn_ex(g, x, c), x[0]), x[3]);
}
static vt_tensor *b_mean(vt_graph *g, vt_tensor **x, const gc_case *c) { return vt_mean(g, x[0], c->ia[0]); }
/* ia: k, s, pad, ceil_mode, count_include_pad, nhwc */
static vt_tensor *b_avgpool_ex(vt_graph *g, vt_tensor **x, const gc_case *c) {
    const vt_pool_args a = {c->ia[0], c->ia[1], c->ia[2], c->ia[3], c->ia[4], c->ia[5]};
    return vt_avgpool2d_ex(g, x[0], &a);
}
static vt_tensor *b_concat(vt_graph *g, vt_tensor **x, const gc_case *c) { return vt_concat(g, x, c->nx, c->ia[0]); }
static vt_tensor *b_slice(vt_graph *g, vt_tensor **x, const gc_case *c) {
    return vt_slice(g, x[0], c->ia[0], c->ia[1], c->ia[2]);
}
static vt_tensor *b_permute(vt_graph *g, vt_tensor **x, const gc_case *c) { return vt_permute(g, x[0], c->ia); }
/* ia: the permutation (ndim entries), then the sliced axis, its start and length. */
static vt_tensor *b_permute_slice(vt_graph *g, vt_tensor **x, const gc_case *c) {
    const int nd = x[0]->ndim;
    return vt_permute_slice(g, x[0], c->ia, c->ia[nd], c->ia[nd + 1], c->ia[nd + 2]);
}
static vt_tensor *b_split(vt_graph *g, vt_tensor **x, const gc_case *c) {
    return vt_split_heads(g, x[0], c->ia[0], c->ia[1], c->ia[2]);
}
static vt_tensor *b_merge(vt_graph *g, vt_tensor **x, const gc_case *c) {
    (void)c;
    return vt_merge_heads(g, x[0]);
}
static vt_tensor *b_prepend(vt_graph *g, vt_tensor **x, const gc_case *c) {
    (void)c;
    return vt_prepend_tokens(g, x[0], x[1]);
}
/* split -> merge -> slice -> concat chain: gradients flow through several shape ops back to back. */
static vt_tensor *b_chain(vt_graph *g, vt_tensor **x, const gc_case *c) {
    (void)c;
    vt_tensor *h = vt_merge_heads(g, vt_split_heads(g, x[0], 2, 2, 3));           /* (2, 3, 6) */
    vt_tensor *parts[2] = {vt_slice(g, h, 2, 4, 2), vt_slice(g, x[0], 2, 0, 4)}; /* (2, 3, 2), (2, 3, 4) */
    const int p[3] = {0, 2, 1};
    return vt_permute(g, vt_concat(g, parts, 2, 2), p);
}

/* Slices of an activation that are views of it (contiguous ranges along axis 0): the middle third feeds a linear
 * layer, whose backward may write its input's gradient rather than add (vt_node.grad_fresh) only where that input
 * covers its root's memory, so the other thirds' gradients must stay zero, not NaN (the poisoned backward); a
 * reshape of a view of a view adds the offsets. */
static vt_tensor *b_slice_views(vt_graph *g, vt_tensor **x, const gc_case *c) {
    (void)c;
    vt_tensor *z = vt_scale(g, x[0], 2.0f); /* (3, 4, 5): an activation root */
    vt_tensor *mid = vt_slice(g, z, 0, 1, 1), *last = vt_slice(g, vt_slice(g, z, 0, 1, 2), 0, 1, 1);
    const int s2[2] = {4, 5};
    vt_tensor *t = vt_slice(g, vt_reshape(g, last, 2, s2), 1, 0, 3);  /* (4, 3), a copy */
    return vt_add(g, t, vt_linear(g, vt_reshape(g, mid, 2, s2), x[1], NULL)); /* the linear reads z last */
}

/* x0 read by a concat and a permute and then, later in the forward, by two products: the concat's and the permute's
 * backward must add into x0's gradient (a first write there would drop the products' part), while the second
 * permute, its input's only reader, writes its gradient first. */
static vt_tensor *b_concat_permute_reuse(vt_graph *g, vt_tensor **x, const gc_case *c) {
    (void)c;
    vt_tensor *parts[2] = {x[0], x[1]}; /* (2, 3, 4), (2, 2, 4) */
    const int p[3] = {0, 2, 1};
    vt_tensor *s = vt_slice(g, vt_concat(g, parts, 2, 1), 1, 1, 3), *t = vt_permute(g, vt_permute(g, x[0], p), p);
    return vt_add(g, vt_mul(g, s, x[0]), vt_mul(g, t, x[0]));
}

/* ---- a tiny harness for forward-value checks: operands are parameters filled with N(0, 1) ---- */

typedef struct {
    vt_params *P;
    vt_graph *g;
    vt_rng r;
    vt_err e;
} fenv;

/* An eval graph on the GEMM plan of lib ("openblas", "onednn"; NULL: the default, as VITC_GEMM would set it). */
static void fenv_open_lib(fenv *f, const char *lib) {
    memset(f, 0, sizeof *f);
    f->P = vt_params_new(&f->e);
    f->g = vt_graph_new(f->P, 0, &f->e);
    if (lib && f->g) { /* before any node: no primitive was made from the plan yet */
        vt_gemm_plan_free(&f->g->gemm);
        vt_gemm_plan_init(&f->g->gemm, lib, &f->e);
    }
    vt_rng_seed(&f->r, 99);
}

static void fenv_open(fenv *f) { fenv_open_lib(f, NULL); }

static vt_tensor *fenv_param(fenv *f, const char *name, int ndim, const int *shape) {
    vt_tensor *t = vt_param(f->g, name, ndim, shape, (vt_init){VT_INIT_ZERO, 0});
    if (t)
        for (int64_t i = 0; i < t->numel; i++) t->data[i] = vt_rng_normal(&f->r);
    return t;
}

/* Finalizes and runs the graph; returns 0 on success (a failed build is recorded as a failed check). */
static int fenv_run(vt_test *T, fenv *f, vt_tensor *y, const char *what) {
    vt_graph_output(f->g, y);
    if (vt_graph_finalize(f->g, &f->e)) {
        T_CHECK(T, 0, "%s: build failed: %s", what, f->e.msg);
        return -1;
    }
    vt_graph_forward(f->g);
    return 0;
}

static void fenv_close(fenv *f) {
    vt_graph_free(f->g);
    vt_params_free(f->P);
}

/* max |y - ref| / max(1, max |ref|) */
static double rel_err(const float *y, const double *ref, int64_t n) {
    double e = 0.0, m = 1.0;
    for (int64_t i = 0; i < n; i++) {
        e = t_worse(e, fabs(y[i] - ref[i]));
        m = fmax(m, fabs(ref[i]));
    }
    return e / m;
}

/* ---- conv2d against a direct double-precision convolution ---- */

typedef struct {
    int B, Cin, H, W, Cout, kh, kw, s, p, G, bias;
} convcfg;

static void conv_naive(const convcfg *c, const float *x, const float *w, const float *b, double *y, int Ho, int Wo) {
    const int Cg = c->Cin / c->G, Og = c->Cout / c->G;
    for (int n = 0; n < c->B; n++)
        for (int o = 0; o < c->Cout; o++)
            for (int oh = 0; oh < Ho; oh++)
                for (int ow = 0; ow < Wo; ow++) {
                    double s = b ? b[o] : 0.0;
                    const int grp = o / Og;
                    for (int ci = 0; ci < Cg; ci++)
                        for (int ki = 0; ki < c->kh; ki++)
                            for (int kj = 0; kj < c->kw; kj++) {
                                const int ih = oh * c->s - c->p + ki, iw = ow * c->s - c->p + kj;
                                if (ih < 0 || ih >= c->H || iw < 0 || iw >= c->W) continue;
                                s += (double)w[((o * Cg + ci) * c->kh + ki) * c->kw + kj] *
                                     x[((n * c->Cin + grp * Cg + ci) * c->H + ih) * c->W + iw];
                            }
                    y[((n * c->Cout + o) * Ho + oh) * Wo + ow] = s;
                }
}

/* The operands of cfg c as parameters of f's graph, x NCHW or channels-last (nhwc); b NULL without bias. */
static void conv_operands(fenv *f, const convcfg *c, int nhwc, vt_tensor **x, vt_tensor **w, vt_tensor **b) {
    const int xs[4] = {c->B, nhwc ? c->H : c->Cin, nhwc ? c->W : c->H, nhwc ? c->Cin : c->W};
    const int ws[4] = {c->Cout, c->Cin / c->G, c->kh, c->kw}, bs[1] = {c->Cout};
    *x = fenv_param(f, "x", 4, xs);
    *w = fenv_param(f, "w", 4, ws);
    *b = c->bias ? fenv_param(f, "b", 1, bs) : NULL;
}

/* Nodes of g running op. */
static int count_op(const vt_graph *g, const char *op) {
    int k = 0;
    for (int i = 0; i < g->nn; i++) k += strcmp(g->nodes[i]->op->name, op) == 0;
    return k;
}

/* ref = max(ref, 0) over n values. */
static void relu_ref(double *ref, int64_t n) {
    for (int64_t i = 0; i < n; i++) ref[i] = ref[i] > 0.0 ? ref[i] : 0.0;
}

/* Each cfg with and without the fused ReLU (vt_conv2d[_nhwc]_relu: one node in these inference graphs, no relu op), on
 * the default plan, the openblas one and the onednn one, at 1-3 threads, against conv_naive (through NCHW copies of x and of the
 * reference when nhwc); output size and MACs too. */
static void conv_values_sweep(vt_test *T, const convcfg *cfgs, size_t ncfg, int nhwc) {
    const char *what = nhwc ? "conv_nhwc" : "conv";
    const int threads[3] = {1, 2, 3}, saved = omp_get_max_threads();
    static const char *const libs[3] = {NULL, "openblas", "onednn"};
    for (int v = 0; v < 6; v++) { /* v & 1: ReLU fused; v >> 1: the GEMM plan */
        const char *lib = libs[v >> 1];
        const int relu = v & 1;
        for (int ti = 0; ti < 3; ti++) {
            omp_set_num_threads(threads[ti]);
            for (size_t k = 0; k < ncfg; k++) {
                const convcfg *c = &cfgs[k];
                fenv f;
                fenv_open_lib(&f, lib);
                vt_tensor *x, *w, *b, *y;
                conv_operands(&f, c, nhwc, &x, &w, &b);
                if (nhwc)
                    y = (relu ? vt_conv2d_nhwc_relu : vt_conv2d_nhwc)(f.g, x, w, b, c->s, c->p, c->G);
                else
                    y = (relu ? vt_conv2d_relu : vt_conv2d)(f.g, x, w, b, c->s, c->p, c->G);
                if (fenv_run(T, &f, y, nhwc ? "conv_nhwc values" : "conv2d values") == 0) {
                    const int Ho = (c->H + 2 * c->p - c->kh) / c->s + 1, Wo = (c->W + 2 * c->p - c->kw) / c->s + 1;
                    const int hw = c->H * c->W, ohw = Ho * Wo, oh = y->shape[nhwc ? 1 : 2], ow = y->shape[nhwc ? 2 : 3];
                    static float xc[8192];
                    static double ref[8192], yr[8192];
                    for (int n = 0; nhwc && n < c->B; n++) /* the NCHW copy the reference reads */
                        for (int ch = 0; ch < c->Cin; ch++)
                            for (int i = 0; i < hw; i++)
                                xc[((size_t)n * c->Cin + ch) * hw + i] = x->data[((size_t)n * hw + i) * c->Cin + ch];
                    conv_naive(c, nhwc ? xc : x->data, w->data, b ? b->data : NULL, ref, Ho, Wo);
                    for (int n = 0; nhwc && n < c->B; n++)
                        for (int o = 0; o < c->Cout; o++)
                            for (int i = 0; i < ohw; i++)
                                yr[((size_t)n * ohw + i) * c->Cout + o] = ref[((size_t)n * c->Cout + o) * ohw + i];
                    double *want = nhwc ? yr : ref;
                    if (relu) relu_ref(want, y->numel);
                    const double err = rel_err(y->data, want, y->numel);
                    T_CHECK(T, oh == Ho && ow == Wo && err < 1e-5 && count_op(f.g, "relu") == 0,
                            "%s cfg %zu (%s%s, %d threads): output %dx%d (want %dx%d), rel err %g, %d relu nodes",
                            what, k, lib ? lib : "default", relu ? ", ReLU" : "", threads[ti], oh, ow, Ho, Wo,
                            err, count_op(f.g, "relu"));
                    T_CHECK(T, vt_graph_macs(f.g) == (int64_t)c->B * c->Cout * ohw * (c->Cin / c->G) * c->kh * c->kw,
                            "%s cfg %zu: MACs %lld", what, k, (long long)vt_graph_macs(f.g));
                }
                fenv_close(&f);
            }
        }
    }
    omp_set_num_threads(saved);
}

/* conv2d and vt_conv2d_relu (one node in these inference graphs, no relu op), on the default plan (oneDNN where it
 * takes the conv), on VITC_GEMM=openblas (im2col + sgemm, the depthwise and pointwise loops) and on VITC_GEMM=onednn
 * (the oneDNN convolution wherever conv.c may take it), 1-3 threads. */
static void check_conv_values(vt_test *T) {
    static const convcfg cfgs[] = {
        {2, 3, 7, 9, 5, 3, 3, 1, 1, 1, 1},   /* dense 3x3, non-square */
        {3, 4, 9, 6, 6, 3, 3, 2, 1, 2, 1},   /* groups 2, stride 2, odd H */
        {2, 6, 9, 8, 5, 3, 3, 2, 1, 1, 1},   /* dense 3x3, stride 2, more than 4 channels (oneDNN at AVX-512) */
        {2, 6, 8, 7, 6, 3, 3, 1, 1, 6, 1},   /* depthwise */
        {1, 5, 11, 9, 5, 7, 7, 2, 3, 5, 0},  /* depthwise 7x7, stride 2, pad 3, B=1 */
        {2, 3, 7, 7, 6, 3, 3, 1, 0, 3, 1},   /* channel multiplier 2 (grouped, not depthwise) */
        {2, 8, 5, 6, 4, 1, 1, 1, 0, 1, 1},   /* pointwise */
        {2, 8, 5, 6, 4, 1, 1, 2, 0, 2, 0},   /* 1x1 stride 2 grouped */
        {2, 3, 16, 12, 7, 4, 4, 4, 0, 1, 1}, /* patch embedding */
        {1, 2, 6, 5, 3, 5, 3, 3, 2, 1, 1},   /* kh != kw, stride 3 */
        {4, 2, 3, 4, 2, 3, 3, 1, 2, 1, 1},   /* padding larger than needed */
        {2, 4, 5, 21, 4, 3, 3, 1, 3, 4, 1},  /* depthwise, padding > k-1, W spanning two 16-wide blocks */
        {1, 3, 6, 17, 3, 5, 5, 1, 0, 3, 1},  /* depthwise 5x5 without padding (output narrower than input) */
        /* strided depthwise (the phase-split planes): three 16-wide output blocks; stride 3; two 8-row tiles; no
         * padding, the last input column and row read by no tap */
        {2, 4, 9, 70, 4, 3, 3, 2, 1, 4, 1},
        {1, 3, 10, 11, 3, 5, 5, 3, 2, 3, 0},
        {2, 2, 20, 18, 2, 7, 7, 2, 3, 2, 1},
        {1, 2, 8, 9, 2, 3, 3, 2, 0, 2, 1},
        {2, 16, 7, 9, 24, 3, 3, 1, 1, 1, 1}, /* dense 3x3, stride 1, 16 -> 24 channels, too few pixels for Winograd */
    };
    conv_values_sweep(T, cfgs, sizeof cfgs / sizeof cfgs[0], 0);
}

/* In a training graph, and with ref_kernels, vt_conv2d_relu and vt_conv2d_nhwc_relu are the conv and a relu op. */
static void check_conv_relu_chain(vt_test *T) {
    for (int v = 0; v < 4; v++) { /* v & 1: channels-last; v & 2: eval graph with ref_kernels, else training */
        vt_err e = {0};
        vt_params *P = vt_params_new(&e);
        vt_graph *g = vt_graph_new(P, !(v & 2), &e);
        g->ref_kernels = (v & 2) != 0;
        const int xs[4] = {2, 8, 8, 8}, ws[4] = {8, 4, 3, 3}; /* NCHW or NHWC alike */
        vt_tensor *x = vt_param(g, "x", 4, xs, (vt_init){VT_INIT_NORMAL, 1.0f});
        vt_tensor *w = vt_param(g, "w", 4, ws, (vt_init){VT_INIT_NORMAL, 0.3f});
        vt_tensor *y = (v & 1 ? vt_conv2d_nhwc_relu : vt_conv2d_relu)(g, x, w, NULL, 1, 1, 2);
        if (!(v & 2)) vt_graph_set_loss(g, vt_sum(g, y));
        vt_graph_output(g, y);
        T_CHECK(T, vt_graph_finalize(g, &e) == 0 && count_op(g, "relu") == 1, "conv relu chain %d: %s, %d relu nodes",
                v, e.msg, count_op(g, "relu"));
        vt_graph_free(g);
        vt_params_free(P);
    }
    for (int nhwc = 0; nhwc < 2; nhwc++) { /* a bad weight: the conv's own error, in an eval graph too */
        vt_err e = {0};
        vt_params *P = vt_params_new(&e);
        vt_graph *g = vt_graph_new(P, 0, &e);
        const int xs[4] = {2, 8, 8, 8}, ws[4] = {8, 3, 3, 3};
        vt_tensor *x = vt_input(g, "x", 4, xs), *w = vt_param(g, "w", 4, ws, (vt_init){VT_INIT_NORMAL, 0.3f});
        vt_tensor *y = (nhwc ? vt_conv2d_nhwc_relu : vt_conv2d_relu)(g, x, w, NULL, 1, 1, 2);
        T_CHECK(T, !y && vt_graph_finalize(g, &e) != 0 && strstr(e.msg, nhwc ? "conv_nhwc" : "conv2d"),
                "bad conv relu %d: %s", nhwc, e.msg);
        vt_graph_free(g);
        vt_params_free(P);
    }
}

/* ---- channels-last dense / grouped conv against the same reference, on oneDNN's convolution (the default plan)
 * and on the patches + sgemm path (VITC_GEMM=openblas), and on VITC_GEMM=onednn, at 1-3 threads ---- */

static void check_conv_nhwc_values(vt_test *T) {
    static const convcfg cfgs[] = {
        {2, 3, 7, 9, 5, 3, 3, 1, 1, 1, 1},    /* dense 3x3, non-square map */
        {3, 4, 9, 6, 6, 3, 3, 2, 1, 2, 1},    /* groups 2, stride 2, odd H */
        {1, 64, 6, 5, 64, 3, 3, 1, 1, 2, 0},  /* Next-ViT's MHCA: 32-channel groups, no bias */
        {2, 6, 8, 7, 6, 3, 3, 1, 1, 6, 1},    /* depthwise */
        {2, 8, 5, 6, 4, 1, 1, 1, 0, 1, 1},    /* pointwise */
        {2, 3, 16, 12, 7, 4, 4, 4, 0, 1, 1},  /* patch embedding */
        {1, 2, 6, 5, 4, 5, 5, 3, 2, 2, 1},    /* 5x5, stride 3 */
        /* the rows kernel (at least 16 channels per group; the AVX2 tier and the OpenBLAS plan): 289 output pixels,
         * two tasks (256 + 33); stride 2 with a bias-free 5x5 whose taps fall off every border; two 16-channel groups
         * over 324 pixels (padding 2: whole rows of zero taps) */
        {1, 16, 17, 17, 12, 3, 3, 1, 1, 1, 1},
        {2, 20, 9, 8, 24, 5, 5, 2, 2, 1, 0},
        {1, 32, 16, 16, 16, 3, 3, 1, 2, 2, 1},
        {2, 16, 9, 11, 32, 3, 3, 1, 1, 1, 1}, /* dense 3x3, stride 1, 16 -> 32 channels, too few pixels for Winograd */
    };
    conv_values_sweep(T, cfgs, sizeof cfgs / sizeof cfgs[0], 1);
}

/* In a training graph the OpenBLAS plan runs a channels-last conv with 16 channels on the rows kernel, its backward
 * in the same tasks (the gradients: gc_run's conv_nhwc_rows_* and groups32 cases against finite differences and the
 * reference kernels), and a forced oneDNN plan does not. */
static void check_conv_nhwc_rows_train(vt_test *T) {
    static const char *const libs[2] = {"openblas", "onednn"};
    for (int l = 0; l < 2; l++) {
        vt_err e = {0};
        vt_params *P = vt_params_new(&e);
        vt_graph *g = vt_graph_new(P, 1, &e);
        vt_gemm_plan_free(&g->gemm); /* no primitive was made from it yet */
        vt_gemm_plan_init(&g->gemm, libs[l], &e);
        const int xs[4] = {1, 17, 17, 16}, ws[4] = {8, 16, 3, 3};
        vt_tensor *x = vt_param(g, "x", 4, xs, (vt_init){VT_INIT_NORMAL, 1.0f});
        vt_tensor *w = vt_param(g, "w", 4, ws, (vt_init){VT_INIT_NORMAL, 0.1f});
        vt_graph_set_loss(g, vt_sum(g, vt_conv2d_nhwc(g, x, w, NULL, 1, 1, 1)));
        T_CHECK(T, vt_graph_finalize(g, &e) == 0, "finalize: %s", e.msg);
        const char *kern = NULL;
        for (int i = 0; i < g->nn; i++)
            if (strcmp(g->nodes[i]->op->name, "conv_nhwc") == 0 && g->nodes[i]->kern) kern = g->nodes[i]->kern->name;
        const int rows = kern && strcmp(kern, "conv_nhwc.rows") == 0;
        T_CHECK(T, rows == (l == 0), "training conv_nhwc on the %s plan ran %s", libs[l],
                kern ? kern : "the reference");
        vt_graph_free(g);
        vt_params_free(P);
    }
}

/* ---- depthwise channels-last conv against a direct reference ---- */

static void check_dwconv_nhwc_values(vt_test *T) {
    static const int cfgs[][6] = {/* B, H, W, C, k, pad */ {2, 5, 7, 6, 3, 1}, {1, 9, 8, 5, 7, 3}, {2, 6, 5, 3, 3, 0},
                                 {1, 5, 4, 37, 3, 1}, {2, 3, 3, 32, 3, 2},
                                 {1, 4, 12, 37, 5, 2}, /* strips with padding columns, 4 8-channel blocks + 5 */
                                 {1, 3, 21, 19, 5, 2},  /* an 8-pixel strip inside the row, a 5-pixel one at its end */
                                 {1, 4, 11, 29, 3, 1},  /* AVX-512: a 16-channel block, an 8-channel one, 5 channels */
                                 {2, 9, 1, 19, 3, 1},   /* one column: run as one row, the taps transposed */
                                 {1, 6, 1, 9, 3, 2}};   /* one column padded to three output columns: not */
    for (size_t k = 0; k < 2 * sizeof cfgs / sizeof cfgs[0]; k++) { /* odd k: channels 3.. of a wider x, plus r */
        const int *cf = cfgs[k / 2], ex = (int)(k % 2);
        const int B = cf[0], H = cf[1], W = cf[2], C = cf[3], K = cf[4], p = cf[5], L = ex ? C + 5 : C, c0 = ex ? 3 : 0;
        const int Ho = H + 2 * p - K + 1, Wo = W + 2 * p - K + 1;
        fenv f;
        fenv_open(&f);
        const int xs[4] = {B, H, W, L}, ws[4] = {C, 1, K, K}, bs[1] = {C}, rs[3] = {B, Ho * Wo, C};
        vt_tensor *x = fenv_param(&f, "x", 4, xs), *w = fenv_param(&f, "w", 4, ws), *b = fenv_param(&f, "b", 1, bs);
        vt_tensor *r = ex ? fenv_param(&f, "r", 3, rs) : NULL;
        vt_tensor *y = ex ? vt_dwconv_nhwc_ex(f.g, x, c0, w, b, p, r) : vt_dwconv_nhwc(f.g, x, w, b, p);
        if (fenv_run(T, &f, y, "dwconv_nhwc values") == 0) {
            double ref[2048];
            for (int n = 0; n < B; n++)
                for (int oh = 0; oh < Ho; oh++)
                    for (int ow = 0; ow < Wo; ow++)
                        for (int c = 0; c < C; c++) {
                            const size_t o = ((size_t)(n * Ho + oh) * Wo + ow) * C + c;
                            double s = b->data[c] + (r ? r->data[o] : 0.0);
                            for (int ki = 0; ki < K; ki++)
                                for (int kj = 0; kj < K; kj++) {
                                    const int ih = oh - p + ki, iw = ow - p + kj;
                                    if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                                    s += (double)w->data[(c * K + ki) * K + kj] *
                                         x->data[((n * H + ih) * W + iw) * L + c0 + c];
                                }
                            ref[o] = s;
                        }
            T_CHECK(T, y->shape[1] == Ho && y->shape[2] == Wo, "dwconv_nhwc cfg %zu: bad output shape", k);
            double err = rel_err(y->data, ref, y->numel);
            T_CHECK(T, err < 1e-5, "dwconv_nhwc cfg %zu: rel err %g", k, err);
            T_CHECK(T, vt_graph_macs(f.g) == (int64_t)B * Ho * Wo * C * K * K, "dwconv_nhwc MACs %lld",
                    (long long)vt_graph_macs(f.g));
        }
        fenv_close(&f);
    }
}

/* ---- pooling values ---- */

static void check_pool_values(vt_test *T) {
    static const int cfgs[][7] = {/* B, C, H, W, k, s, pad */ {2, 3, 5, 7, 3, 1, 1}, {1, 2, 7, 5, 2, 2, 0},
                                  {1, 2, 6, 5, 3, 2, 1}};
    for (size_t k = 0; k < sizeof cfgs / sizeof cfgs[0]; k++) {
        const int B = cfgs[k][0], C = cfgs[k][1], H = cfgs[k][2], W = cfgs[k][3], K = cfgs[k][4], s = cfgs[k][5],
                  p = cfgs[k][6];
        fenv f;
        fenv_open(&f);
        const int xs[4] = {B, C, H, W};
        const vt_pool_args a = {K, s, p, 0, 1, 0}; /* PyTorch's defaults: floor, padding counted */
        vt_tensor *x = fenv_param(&f, "x", 4, xs), *y = vt_avgpool2d_ex(f.g, x, &a);
        if (fenv_run(T, &f, y, "avgpool2d values") == 0) {
            const int Ho = (H + 2 * p - K) / s + 1, Wo = (W + 2 * p - K) / s + 1;
            double ref[1024];
            for (int pl = 0; pl < B * C; pl++)
                for (int oh = 0; oh < Ho; oh++)
                    for (int ow = 0; ow < Wo; ow++) {
                        double acc = 0.0;
                        for (int ki = 0; ki < K; ki++)
                            for (int kj = 0; kj < K; kj++) {
                                const int ih = oh * s - p + ki, iw = ow * s - p + kj;
                                if (ih >= 0 && ih < H && iw >= 0 && iw < W) acc += x->data[(pl * H + ih) * W + iw];
                            }
                        ref[(pl * Ho + oh) * Wo + ow] = acc / (K * K); /* padding counted in the divisor */
                    }
            T_CHECK(T, y->shape[2] == Ho && y->shape[3] == Wo, "avgpool cfg %zu: bad output shape", k);
            double err = rel_err(y->data, ref, y->numel);
            T_CHECK(T, err < 1e-6, "avgpool cfg %zu: rel err %g", k, err);
        }
        fenv_close(&f);
    }
    /* PyTorch's ceil_mode / count_include_pad rules in both layouts, against a direct transcription of its
     * avg_pool2d loops: e.g. Next-ViT's AvgPool2d(2, 2, ceil_mode=True, count_include_pad=False) on odd maps, where
     * a 3x3 plane [0..8] gives [2, 3.5, 6.5, 8] */
    static const int ex[][10] = {/* B, C, H, W, k, s, pad, ceil, incl, nhwc */
                                 {1, 1, 3, 3, 2, 2, 0, 1, 0, 0}, {2, 3, 5, 7, 2, 2, 0, 1, 0, 1},
                                 {1, 2, 6, 5, 3, 2, 1, 1, 1, 0}, {2, 5, 7, 6, 3, 2, 1, 1, 0, 1},
                                 {1, 3, 4, 4, 2, 2, 0, 0, 1, 1}, {1, 2, 8, 5, 3, 3, 1, 1, 1, 1},
                                 /* one row under a 2x2 window: ceil_mode keeps the windows that start in it (Next-ViT's
                                  * last patch embed on a 16 px high input) */
                                 {1, 2, 1, 5, 2, 2, 0, 1, 0, 0}, {2, 3, 1, 4, 2, 2, 0, 1, 0, 1}};
    for (size_t k = 0; k < sizeof ex / sizeof ex[0]; k++) {
        const int *q = ex[k], B = q[0], C = q[1], H = q[2], W = q[3], K = q[4], s = q[5], p = q[6], nhwc = q[9];
        fenv fe;
        fenv_open(&fe);
        const int xs[4] = {B, nhwc ? H : C, nhwc ? W : H, nhwc ? C : W};
        const vt_pool_args a = {K, s, p, q[7], q[8], nhwc};
        vt_tensor *x = fenv_param(&fe, "x", 4, xs);
        if (k == 0)
            for (int i = 0; i < 9; i++) x->data[i] = (float)i;
        vt_tensor *y = vt_avgpool2d_ex(fe.g, x, &a);
        if (fenv_run(T, &fe, y, "avgpool2d_ex values") == 0) {
            int Ho = (H + 2 * p - K + (q[7] ? s - 1 : 0)) / s + 1, Wo = (W + 2 * p - K + (q[7] ? s - 1 : 0)) / s + 1;
            if (q[7] && (Ho - 1) * s >= H + p) Ho--;
            if (q[7] && (Wo - 1) * s >= W + p) Wo--;
            double ref[1024];
            for (int b = 0; b < B; b++)
                for (int c = 0; c < C; c++)
                    for (int oh = 0; oh < Ho; oh++)
                        for (int ow = 0; ow < Wo; ow++) {
                            int hs = oh * s - p, ws = ow * s - p, he = hs + K, we = ws + K;
                            he = he < H + p ? he : H + p;
                            we = we < W + p ? we : W + p;
                            const int pool = (he - hs) * (we - ws);
                            hs = hs > 0 ? hs : 0, ws = ws > 0 ? ws : 0, he = he < H ? he : H, we = we < W ? we : W;
                            double acc = 0.0;
                            for (int ih = hs; ih < he; ih++)
                                for (int iw = ws; iw < we; iw++)
                                    acc += x->data[nhwc ? ((b * H + ih) * W + iw) * C + c : ((b * C + c) * H + ih) * W + iw];
                            ref[nhwc ? ((b * Ho + oh) * Wo + ow) * C + c : ((b * C + c) * Ho + oh) * Wo + ow] =
                                acc / (q[8] ? pool : (he - hs) * (we - ws));
                        }
            const int want[4] = {B, nhwc ? Ho : C, nhwc ? Wo : Ho, nhwc ? C : Wo};
            T_CHECK(T, !memcmp(y->shape, want, sizeof want), "avgpool_ex cfg %zu: bad output shape", k);
            const double err = rel_err(y->data, ref, y->numel);
            T_CHECK(T, err < 1e-6, "avgpool_ex cfg %zu: rel err %g", k, err);
            if (k == 0)
                T_CHECK(T, y->data[0] == 2.0f && y->data[1] == 3.5f && y->data[2] == 6.5f && y->data[3] == 8.0f,
                        "avgpool_ex 3x3 ceil/exclusive: %g %g %g %g", y->data[0], y->data[1], y->data[2], y->data[3]);
        }
        fenv_close(&fe);
    }
    /* no window fits (PyTorch: "Output size is too small"): floor mode on 1 row under 2x2, ceil mode under 3x3 / 2 */
    static const int none[][5] = {/* H, W, k, s, ceil */ {1, 5, 2, 2, 0}, {1, 5, 3, 2, 1}, {5, 1, 3, 2, 1}};
    for (size_t k = 0; k < sizeof none / sizeof none[0]; k++) {
        fenv fe;
        fenv_open(&fe);
        const int xs[4] = {1, 2, none[k][0], none[k][1]};
        const vt_pool_args a = {none[k][2], none[k][3], 0, none[k][4], 0, 0};
        T_CHECK(T, !vt_avgpool2d_ex(fe.g, fenv_param(&fe, "x", 4, xs), &a) && strstr(fe.g->err.msg, "smaller than"),
                "avgpool %dx%d under %dx%d / %d (ceil %d): refused? '%s'", none[k][0], none[k][1], none[k][2],
                none[k][2], none[k][3], none[k][4], fe.g->err.msg);
        fenv_close(&fe);
    }
    /* mean over tokens (B, N, C) axis 1 with C wider than the kernel's block */
    fenv f;
    fenv_open(&f);
    const int xs[3] = {3, 5, 300};
    vt_tensor *x = fenv_param(&f, "x", 3, xs), *y = vt_mean(f.g, x, 1);
    if (fenv_run(T, &f, y, "mean values") == 0) {
        double ref[900];
        for (int b = 0; b < 3; b++)
            for (int c = 0; c < 300; c++) {
                double s = 0;
                for (int t = 0; t < 5; t++) s += x->data[(b * 5 + t) * 300 + c];
                ref[b * 300 + c] = s / 5;
            }
        T_CHECK(T, y->ndim == 2 && y->shape[0] == 3 && y->shape[1] == 300, "mean: bad output shape");
        T_CHECK(T, rel_err(y->data, ref, 900) < 1e-6, "mean: rel err %g", rel_err(y->data, ref, 900));
    }
    fenv_close(&f);
}

/* ---- shape-op values ---- */

/* Checks vt_permute_slice (axis -1: vt_permute) of a random tensor against direct index arithmetic. */
static void check_permute_slice_case(vt_test *T, int nd, const int *shape, const int *perm, int axis, int start,
                                     int len) {
    fenv f;
    fenv_open(&f);
    vt_tensor *x = fenv_param(&f, "x", nd, shape);
    vt_tensor *y = axis < 0 ? vt_permute(f.g, x, perm) : vt_permute_slice(f.g, x, perm, axis, start, len);
    if (fenv_run(T, &f, y, "permute values") == 0) {
        int64_t ist[VT_MAXDIM], bad = 0;
        ist[nd - 1] = 1;
        for (int d = nd - 2; d >= 0; d--) ist[d] = ist[d + 1] * shape[d + 1];
        for (int64_t i = 0; i < y->numel; i++) {
            int64_t t = i, src = 0;
            for (int d = nd - 1; d >= 0; d--) {
                src += (t % y->shape[d] + (perm[d] == axis ? start : 0)) * ist[perm[d]];
                t /= y->shape[d];
            }
            bad += y->data[i] != x->data[src];
        }
        T_CHECK(T, bad == 0, "permute %d-D (first perm %d, %d; axis %d from %d): %lld wrong elements", nd, perm[0],
                perm[1], axis, start, (long long)bad);
    }
    fenv_close(&f);
}

static void check_permute_case(vt_test *T, int nd, const int *shape, const int *perm) {
    check_permute_slice_case(T, nd, shape, perm, -1, 0, 0);
}

static void check_shape_values(vt_test *T) {
    {
        const int s[3] = {3, 37, 45}, p[3] = {0, 2, 1};
        check_permute_case(T, 3, s, p);
    }
    {
        const int s[4] = {2, 33, 5, 40}, p[4] = {0, 2, 1, 3};
        check_permute_case(T, 4, s, p);
    }
    {
        const int s[4] = {2, 3, 35, 36}, p[4] = {0, 2, 3, 1}; /* NCHW -> NHWC */
        check_permute_case(T, 4, s, p);
    }
    {
        const int s[4] = {2, 35, 36, 3}, p[4] = {0, 3, 1, 2}; /* NHWC -> NCHW */
        check_permute_case(T, 4, s, p);
    }
    {
        const int s[5] = {2, 3, 4, 5, 6}, p[5] = {4, 2, 0, 3, 1};
        check_permute_case(T, 5, s, p);
    }
    {
        const int s[5] = {2, 1, 40, 3, 33}, p[5] = {3, 4, 1, 0, 2};
        check_permute_case(T, 5, s, p);
    }
    {
        const int s[2] = {1, 7}, p[2] = {1, 0};
        check_permute_case(T, 2, s, p);
    }
    { /* GroupMixFormer's segments: qkv (B, N, 3, 5, s) -> segment j as (3, B, 1, s, N), and (B, 3, 1, s, N) */
        const int s[5] = {2, 45, 3, 5, 6}, p[5] = {2, 0, 3, 4, 1}, q[5] = {0, 2, 3, 4, 1};
        for (int j = 0; j < 5; j++) check_permute_slice_case(T, 5, s, p, 3, j, 1);
        check_permute_slice_case(T, 5, s, q, 3, 4, 1);
        const int w[5] = {2, 45, 3, 5, 20}; /* 8×8 register blocks (shape.c) and their remainders */
        check_permute_slice_case(T, 5, w, p, 3, 2, 1);
        check_permute_slice_case(T, 5, w, q, 3, 4, 1);
    }
    { /* a range of the contiguous axis, of an outer one, longer than one element */
        const int s[4] = {2, 37, 5, 40}, p[4] = {0, 3, 1, 2}, q[4] = {1, 0, 2, 3};
        check_permute_slice_case(T, 4, s, p, 3, 7, 30);
        check_permute_slice_case(T, 4, s, p, 1, 3, 33);
        check_permute_slice_case(T, 4, s, q, 0, 1, 1);
    }
    /* split_heads / merge_heads / prepend_tokens / concat / slice against index arithmetic */
    fenv f;
    fenv_open(&f);
    const int B = 2, N = 3, H = 2, dh = 4, Ct = 13, off = 3, xs[3] = {B, N, Ct}, ts[3] = {1, 2, H * dh};
    vt_tensor *x = fenv_param(&f, "x", 3, xs), *tok = fenv_param(&f, "tok", 3, ts);
    vt_tensor *sp = vt_split_heads(f.g, x, off, H, dh), *mg = vt_merge_heads(f.g, sp);
    vt_tensor *pre = vt_prepend_tokens(f.g, mg, tok);
    vt_tensor *parts[3] = {vt_slice(f.g, x, 2, 0, 5), vt_slice(f.g, x, 2, 5, 1), vt_slice(f.g, x, 2, 6, 7)};
    vt_tensor *cat = vt_concat(f.g, parts, 3, -1);
    vt_graph_output(f.g, sp);
    vt_graph_output(f.g, mg);
    vt_graph_output(f.g, cat);
    if (fenv_run(T, &f, pre, "shape values") == 0) {
        int bad = 0;
        for (int b = 0; b < B; b++)
            for (int h = 0; h < H; h++)
                for (int t = 0; t < N; t++)
                    for (int d = 0; d < dh; d++) {
                        float v = x->data[(b * N + t) * Ct + off + h * dh + d];
                        bad += sp->data[((b * H + h) * N + t) * dh + d] != v;
                        bad += mg->data[(b * N + t) * H * dh + h * dh + d] != v;
                        bad += pre->data[(b * (N + 2) + 2 + t) * H * dh + h * dh + d] != v;
                    }
        for (int b = 0; b < B; b++)
            for (int i = 0; i < 2 * H * dh; i++) bad += pre->data[b * (N + 2) * H * dh + i] != tok->data[i];
        T_CHECK(T, bad == 0, "split/merge/prepend: %d wrong elements", bad);
        T_CHECK(T, memcmp(cat->data, x->data, sizeof(float) * (size_t)x->numel) == 0,
                "concat of the slices of x differs from x");
    }
    fenv_close(&f);
}

/* ---- build-time errors ---- */

static void expect_error(vt_test *T, const char *what, vt_tensor *y, vt_graph *g, const char *s1, const char *s2,
                         const char *s3) {
    vt_err e = {0};
    T_CHECK(T, y == NULL, "%s: builder returned a tensor", what);
    T_CHECK(T, vt_graph_finalize(g, &e) != 0, "%s: finalize succeeded", what);
    T_CHECK(T, strstr(e.msg, s1) && strstr(e.msg, s2) && (!s3 || strstr(e.msg, s3)), "%s: message lacks %s/%s/%s: %s",
            what, s1, s2, s3 ? s3 : "", e.msg);
}

static void check_errors(vt_test *T) {
    const int xs[4] = {2, 4, 8, 8}, ws[4] = {4, 3, 3, 3}, t3[3] = {2, 3, 4}, t3b[3] = {2, 5, 4};
    struct {
        const char *what, *s1, *s2, *s3;
    } want[] = {
        {"conv2d Cin/groups", "conv2d", "(2, 4, 8, 8)", "(4, 3, 3, 3)"},
        {"conv2d kernel too big", "conv2d", "(2, 4, 8, 8)", "stem.weight"},
        {"dwconv_nhwc channels", "dwconv_nhwc", "(2, 4, 8, 8)", "(4, 3, 3, 3)"},
        {"concat mismatch", "concat", "(2, 5, 4)", "(2, 3, 4)"},
        {"slice range", "slice", "(2, 3, 4)", "[3, 5)"},
        {"permute repeated axis", "permute", "(2, 3, 4)", "0, 0, 1"},
        {"avgpool padding", "avgpool2d", "(2, 4, 8, 8)", NULL},
        {"mean axis", "mean", "(2, 3, 4)", NULL},
        {"split_heads range", "split_heads", "(2, 3, 4)", NULL},
        {"prepend_tokens width", "prepend_tokens", "(2, 3, 4)", "(2, 5, 4)"},
        {"permute_slice range", "permute", "(2, 3, 4)", "[2, 5)"},
        {"view range", "view", "(2, 3, 4)", "[20, 26)"},
        {"conv_tokens NCHW channels", "conv_tokens", "(2, 4, 8, 8) (B, C, H, W)", "(4, 3, 3, 3)"},
        {"conv_tokens channels-last channels", "conv_tokens", "(2, 4, 8, 8) (B, H, W, C)", "(4, 3, 3, 3)"},
        {"conv_tokens kernel past the map", "im2col", "(2, 4, 8, 8)", NULL},
        /* found by review: each crashed (a division by zero, a read past the shape), built garbage or wrapped */
        {"conv_tokens stride 0", "conv_tokens", "stride 0", NULL},
        {"drop_path of a scalar", "drop_path", "scalar", NULL},
        {"attention: kv another view of q's tensor", "attention", "different views", NULL},
        {"concat past INT_MAX on its axis", "concat", "sum past", NULL},
        {"batchnorm channel axis out of range", "batchnorm", "channel axis 4 of a 4-D", NULL},
        {"conv_weight groups 0", "conv_weight", "groups 0", NULL},
        {"posemb grid product past INT_MAX", "posemb_sincos2d", "65537x65537", NULL},
        {"linear attention without arguments", "linear_attention", "no arguments", NULL},
        {"avgpool without arguments", "avgpool2d", "no arguments", NULL},
        {"conv_bias groups 0", "conv_bias", "groups 0", NULL},
        {"an MLP of a scalar", "mlp", "scalar input", NULL},
        {"a linear layer of a scalar", "linear", "scalar input", NULL},
        {"a LayerNorm of a scalar", "layernorm", "scalar input", NULL},
    };
    for (int k = 0; k < (int)(sizeof want / sizeof want[0]); k++) {
        vt_err e = {0};
        vt_params *P = vt_params_new(&e);
        vt_graph *g = vt_graph_new(P, 1, &e);
        vt_tensor *x4 = vt_input(g, "x", 4, xs), *a = vt_input(g, "a", 3, t3), *b = vt_input(g, "b", 3, t3b), *y;
        switch (k) {
        case 0: y = vt_conv2d(g, x4, vt_param(g, "w", 4, ws, (vt_init){0, 0}), NULL, 1, 1, 2); break;
        case 1: {
            const int big[4] = {3, 4, 11, 11};
            y = vt_conv2d(g, x4, vt_param(g, "stem.weight", 4, big, (vt_init){0, 0}), NULL, 1, 1, 1);
            break;
        }
        case 2: y = vt_dwconv_nhwc(g, x4, vt_param(g, "w", 4, ws, (vt_init){0, 0}), NULL, 1); break;
        case 3: {
            vt_tensor *xs2[2] = {a, b};
            y = vt_concat(g, xs2, 2, 2);
            break;
        }
        case 4: y = vt_slice(g, a, 1, 3, 2); break;
        case 5: {
            const int p[3] = {0, 0, 1};
            y = vt_permute(g, a, p);
            break;
        }
        case 6: y = vt_avgpool2d_ex(g, x4, &(vt_pool_args){3, 1, 2, 0, 1, 0}); break;
        case 7: y = vt_mean(g, a, 3); break;
        case 8: y = vt_split_heads(g, a, 1, 2, 2); break;
        case 9: y = vt_prepend_tokens(g, a, b); break;
        case 10: {
            const int p[3] = {2, 1, 0};
            y = vt_permute_slice(g, a, p, 2, 2, 3);
            break;
        }
        case 11: y = vt_view_range(g, a, 20, 2, (const int[]){2, 3}); break;
        case 12: /* vt_conv_tokens (patch embeds, CSwin's stem and merges): 4 input channels against a 3-channel weight */
        case 13: y = vt_conv_tokens(g, x4, k == 13, vt_param(g, "w", 4, ws, (vt_init){0, 0}), NULL, 2, 1); break;
        case 14: {
            const int big[4] = {3, 4, 11, 11};
            y = vt_conv_tokens(g, x4, 0, vt_param(g, "w", 4, big, (vt_init){0, 0}), NULL, 1, 0);
            break;
        }
        case 15: {
            const int w4[4] = {4, 4, 3, 3};
            y = vt_conv_tokens(g, x4, 0, vt_param(g, "w", 4, w4, (vt_init){0, 0}), NULL, 0, 0);
            break;
        }
        case 16: y = vt_drop_path(g, vt_input(g, "s", 0, NULL), 0.1f); break; /* a training graph */
        case 17: { /* two rows of one tensor as q and kv: kv was taken for q (self-attention), with no error */
            const int s6[3] = {4, 3, 8}, s3[3] = {2, 3, 8};
            vt_tensor *X = vt_input(g, "X", 3, s6);
            const vt_attn_args aa = {.heads = 2, .dim = 8};
            y = vt_attention_ex(g, vt_view_range(g, X, 0, 3, s3), vt_view_range(g, X, 48, 3, s3), &aa);
            break;
        }
        case 18: {
            const int big[1] = {2000000000};
            vt_tensor *two[2] = {vt_input(g, "u", 1, big), vt_input(g, "v", 1, big)};
            y = vt_concat(g, two, 2, 0);
            break;
        }
        case 19:
            y = vt_batchnorm_p(g, "bn", x4, 4, 1e-5f, 0.1f);
            T_CHECK(T, !vt_params_find(P, "bn.weight"), "batchnorm refused: no parameters of a made-up width added");
            break;
        case 20: y = vt_conv_weight(g, "cw", 4, 4, 3, 0); break;
        case 21: y = vt_posemb_sincos2d(g, 65537, 65537, 8, 10000.0f); break;
        case 22: y = vt_linear_attention_ex(g, a, a, a, NULL); break;
        case 23: y = vt_avgpool2d_ex(g, x4, NULL); break;
        case 24: y = vt_conv_bias(g, "cb", 4, 4, 3, 0); break;
        case 25: y = vt_block_mlp(g, "mlp", vt_input(g, "s", 0, NULL), 8); break;
        case 26: y = vt_linear_p(g, "fc", vt_input(g, "s", 0, NULL), 8, 1, VT_INIT_W02); break;
        default: y = vt_layernorm_p(g, "ln", vt_input(g, "s", 0, NULL), 1e-5f); break;
        }
        expect_error(T, want[k].what, y, g, want[k].s1, want[k].s2, want[k].s3);
        vt_graph_free(g);
        vt_params_free(P);
    }
}

/* ---- gradient checks ---- */

static const gc_case conv_cases[] = {
    {.name = "conv_nhwc_3x3_p1", .nx = 3, .ndim = {4, 4, 1}, .shape = {{2, 5, 6, 3}, {4, 3, 3, 3}, {4}},
     .build = b_convn, .ia = {1, 1, 1}},
    {.name = "conv_nhwc_groups2_s2", .nx = 2, .ndim = {4, 4}, .shape = {{3, 7, 5, 4}, {6, 2, 3, 3}},
     .build = b_convn, .ia = {2, 1, 2}},
    {.name = "conv_nhwc_groups3_p0_B1", .nx = 3, .ndim = {4, 4, 1}, .shape = {{1, 6, 5, 6}, {3, 2, 3, 3}, {3}},
     .build = b_convn, .ia = {1, 0, 3}},
    {.name = "conv_nhwc_groups2_residual", .nx = 2, .ndim = {4, 4}, .shape = {{2, 5, 4, 4}, {4, 2, 3, 3}},
     .build = b_convn_res, .ia = {1, 1, 2}},
    {.name = "conv_nhwc_1x1", .nx = 2, .ndim = {4, 4}, .shape = {{2, 3, 4, 5}, {4, 5, 1, 1}}, .build = b_convn,
     .ia = {1, 0, 1}},
    /* 32-channel groups (Next-ViT's MHCA): oneDNN's optimised convs take these (dW through vt_gemm_conv_wgrad), the
     * OpenBLAS plan the rows kernel (dW in its tasks, dX of the stride-1 ones as the rows kernel's transposed conv) */
    {.name = "conv_nhwc_groups32", .nx = 3, .ndim = {4, 4, 1}, .shape = {{2, 6, 5, 64}, {64, 32, 3, 3}, {64}},
     .build = b_convn, .ia = {1, 1, 2}},
    {.name = "conv_nhwc_groups32_s2", .nx = 2, .ndim = {4, 4}, .shape = {{2, 7, 6, 64}, {32, 32, 3, 3}},
     .build = b_convn, .ia = {2, 1, 2}},
    {.name = "conv_nhwc_groups32_twice", .nx = 2, .ndim = {4, 4}, .shape = {{2, 5, 5, 64}, {64, 32, 3, 3}},
     .build = b_convn_twice, .ia = {1, 1, 2}},
    /* the rows kernel in training on the AVX2 tier's default plan too: an ungrouped conv over 289 output pixels (two
     * tasks: 256 + 33), and 16-channel groups over 2,304 pixels (nine tasks; the grouped minimum is 2,048) */
    {.name = "conv_nhwc_rows_tasks", .nx = 3, .ndim = {4, 4, 1}, .shape = {{1, 17, 17, 16}, {8, 16, 3, 3}, {8}},
     .build = b_convn, .ia = {1, 1, 1}},
    {.name = "conv_nhwc_rows_groups16", .nx = 2, .ndim = {4, 4}, .shape = {{1, 48, 48, 32}, {16, 16, 3, 3}},
     .build = b_convn, .ia = {1, 1, 2}},
    {.name = "conv_3x3_p1", .nx = 3, .ndim = {4, 4, 1}, .shape = {{2, 3, 5, 6}, {4, 3, 3, 3}, {4}}, .build = b_conv,
     .ia = {1, 1, 1}},
    {.name = "conv_1x1", .nx = 3, .ndim = {4, 4, 1}, .shape = {{2, 4, 3, 5}, {6, 4, 1, 1}, {6}}, .build = b_conv,
     .ia = {1, 0, 1}},
    {.name = "conv_1x1_s2_odd", .nx = 2, .ndim = {4, 4}, .shape = {{1, 4, 5, 7}, {3, 4, 1, 1}}, .build = b_conv,
     .ia = {2, 0, 1}},
    {.name = "conv_s2_odd_B1", .nx = 2, .ndim = {4, 4}, .shape = {{1, 3, 7, 9}, {4, 3, 3, 3}}, .build = b_conv,
     .ia = {2, 1, 1}},
    /* 28x28 = 784 output pixels per image: a strided conv whose weight gradient takes oneDNN's primitive */
    {.name = "conv_s2_784px", .nx = 2, .ndim = {4, 4}, .shape = {{2, 8, 55, 56}, {16, 8, 3, 3}}, .build = b_conv,
     .ia = {2, 1, 1}},
    {.name = "conv_groups2", .nx = 3, .ndim = {4, 4, 1}, .shape = {{2, 4, 5, 4}, {6, 2, 3, 3}, {6}}, .build = b_conv,
     .ia = {1, 1, 2}},
    {.name = "conv_groups2_s2_B3", .nx = 3, .ndim = {4, 4, 1}, .shape = {{3, 4, 7, 5}, {4, 2, 3, 3}, {4}},
     .build = b_conv, .ia = {2, 0, 2}},
    {.name = "conv_1x1_groups2", .nx = 2, .ndim = {4, 4}, .shape = {{3, 4, 3, 2}, {6, 2, 1, 1}}, .build = b_conv,
     .ia = {1, 0, 2}},
    {.name = "conv_depthwise", .nx = 3, .ndim = {4, 4, 1}, .shape = {{2, 3, 6, 5}, {3, 1, 3, 3}, {3}},
     .build = b_conv, .ia = {1, 1, 3}},
    /* one channel, many small maps (hMHSA's IHH): the depthwise path */
    {.name = "conv_one_channel", .nx = 3, .ndim = {4, 4, 1}, .shape = {{6, 1, 7, 7}, {1, 1, 3, 3}, {1}},
     .build = b_conv, .ia = {1, 1, 1}},
    {.name = "conv_one_channel_s2", .nx = 2, .ndim = {4, 4}, .shape = {{3, 1, 7, 6}, {1, 1, 3, 3}},
     .build = b_conv, .ia = {2, 1, 1}},
    {.name = "conv_depthwise_k5_s2", .nx = 2, .ndim = {4, 4}, .shape = {{1, 4, 9, 7}, {4, 1, 5, 5}},
     .build = b_conv, .ia = {2, 2, 4}},
    /* strided depthwise: two 16-wide output blocks; stride 3; an even kernel; two 8-row tiles; no padding (the last
     * column and row get no gradient) with dX added to x's */
    {.name = "conv_depthwise_s2_wide", .nx = 3, .ndim = {4, 4, 1}, .shape = {{1, 2, 9, 37}, {2, 1, 3, 3}, {2}},
     .build = b_conv, .ia = {2, 1, 2}},
    {.name = "conv_depthwise_k5_s3", .nx = 2, .ndim = {4, 4}, .shape = {{1, 3, 10, 11}, {3, 1, 5, 5}},
     .build = b_conv, .ia = {3, 2, 3}},
    {.name = "conv_depthwise_k4_s2", .nx = 2, .ndim = {4, 4}, .shape = {{2, 2, 9, 9}, {2, 1, 4, 4}},
     .build = b_conv, .ia = {2, 1, 2}},
    {.name = "conv_depthwise_7x7_s2_tall", .nx = 2, .ndim = {4, 4}, .shape = {{1, 2, 20, 18}, {2, 1, 7, 7}},
     .build = b_conv, .ia = {2, 3, 2}},
    {.name = "conv_depthwise_s2_p0_twice", .nx = 2, .ndim = {4, 4}, .shape = {{2, 2, 8, 9}, {2, 1, 3, 3}},
     .build = b_conv_dup, .ia = {2, 0, 2}},
    {.name = "conv_depthwise_7x7_p3", .nx = 3, .ndim = {4, 4, 1}, .shape = {{2, 2, 8, 6}, {2, 1, 7, 7}, {2}},
     .build = b_conv, .ia = {1, 3, 2}},
    /* a kernel width other than 3, 5, 7 (dW one tap at a time), the plane wider than one 16-wide block */
    {.name = "conv_depthwise_2x4_wide", .nx = 2, .ndim = {4, 4}, .shape = {{2, 2, 5, 19}, {2, 1, 2, 4}},
     .build = b_conv, .ia = {1, 1, 2}},
    /* non-square kernels of widths 3 and 7: dW's kernel rows in groups of 3 (5 = 3 + 2, 4 = 3 + 1) */
    {.name = "conv_depthwise_5x3_wide", .nx = 2, .ndim = {4, 4}, .shape = {{2, 2, 7, 19}, {2, 1, 5, 3}},
     .build = b_conv, .ia = {1, 1, 2}},
    {.name = "conv_depthwise_4x7_p3", .nx = 3, .ndim = {4, 4, 1}, .shape = {{1, 3, 9, 10}, {3, 1, 4, 7}, {3}},
     .build = b_conv, .ia = {1, 3, 3}},
    /* x + conv(x): x's gradient gets the conv's dX added (the scratch plane's add); square kernels over planes taller
     * than one 8-row tile */
    {.name = "conv_depthwise_residual", .nx = 2, .ndim = {4, 4}, .shape = {{2, 3, 10, 9}, {3, 1, 3, 3}},
     .build = b_conv_res, .ia = {1, 1, 3}},
    {.name = "conv_depthwise_7x7_tall_residual", .nx = 3, .ndim = {4, 4, 1},
     .shape = {{1, 2, 11, 18}, {2, 1, 7, 7}, {2}}, .build = b_conv_res, .ia = {1, 3, 2}},
    {.name = "conv_dw_multiplier", .nx = 2, .ndim = {4, 4}, .shape = {{2, 2, 5, 5}, {4, 1, 3, 3}}, .build = b_conv,
     .ia = {1, 1, 2}},
    {.name = "conv_patch4", .nx = 3, .ndim = {4, 4, 1}, .shape = {{2, 3, 8, 8}, {5, 3, 4, 4}, {5}}, .build = b_conv,
     .ia = {4, 0, 1}},
    {.name = "conv_groups2_residual", .nx = 2, .ndim = {4, 4}, .shape = {{2, 4, 5, 6}, {4, 2, 3, 3}},
     .build = b_conv_res, .ia = {1, 1, 2}},
    {.name = "conv_5x5_p0", .nx = 2, .ndim = {4, 4}, .shape = {{3, 3, 7, 6}, {4, 3, 5, 5}}, .build = b_conv,
     .ia = {1, 0, 1}},
    {.name = "conv_big_pad", .nx = 2, .ndim = {4, 4}, .shape = {{1, 2, 3, 3}, {2, 2, 3, 3}}, .build = b_conv,
     .ia = {1, 2, 1}},
    {.name = "conv_kh3_kw1", .nx = 2, .ndim = {4, 4}, .shape = {{2, 2, 5, 4}, {3, 2, 3, 1}}, .build = b_conv,
     .ia = {1, 1, 1}},
    {.name = "conv_depthwise_bigpad_wide", .nx = 3, .ndim = {4, 4, 1}, .shape = {{1, 2, 4, 19}, {2, 1, 3, 3}, {2}},
     .build = b_conv, .ia = {1, 3, 2}},
    {.name = "conv_depthwise_5x5_p0", .nx = 2, .ndim = {4, 4}, .shape = {{2, 3, 6, 18}, {3, 1, 5, 5}},
     .build = b_conv, .ia = {1, 0, 3}},
    {.name = "dwconv_nhwc_3x3", .nx = 3, .ndim = {4, 4, 1}, .shape = {{2, 5, 4, 6}, {6, 1, 3, 3}, {6}},
     .build = b_dwn, .ia = {1}},
    {.name = "dwconv_nhwc_7x7_p3", .nx = 3, .ndim = {4, 4, 1}, .shape = {{1, 7, 6, 3}, {3, 1, 7, 7}, {3}},
     .build = b_dwn, .ia = {3}},
    {.name = "dwconv_nhwc_gelu", .nx = 3, .ndim = {4, 4, 1}, .shape = {{2, 5, 4, 6}, {6, 1, 3, 3}, {6}},
     .build = b_dwn_gelu, .ia = {1}},
    {.name = "dwconv_nhwc_ex_offset_add", .nx = 4, .ndim = {4, 4, 1, 3},
     .shape = {{2, 5, 4, 20}, {17, 1, 3, 3}, {17}, {2, 20, 17}}, .build = b_dwn_ex, .ia = {1, 2}},
    /* wide enough for an 8-pixel strip without padding columns (forward and dX), 16 + 2 channels */
    {.name = "dwconv_nhwc_runs", .nx = 3, .ndim = {4, 4, 1}, .shape = {{1, 3, 20, 18}, {18, 1, 3, 3}, {18}},
     .build = b_dwn, .ia = {1}},
    /* 5x5 (the 5-column strips): an 8-pixel strip inside the row, forward and dX, and partial ones at its ends */
    {.name = "dwconv_nhwc_5x5_runs", .nx = 3, .ndim = {4, 4, 1}, .shape = {{1, 4, 22, 18}, {18, 1, 5, 5}, {18}},
     .build = b_dwn, .ia = {2}},
    /* 7x7 (a width neither strip kernel unrolls): the generic strips inside the row, forward and dX */
    {.name = "dwconv_nhwc_7x7_runs", .nx = 3, .ndim = {4, 4, 1}, .shape = {{1, 5, 24, 24}, {24, 1, 7, 7}, {24}},
     .build = b_dwn, .ia = {3}},
    {.name = "dwconv_nhwc_ex_runs", .nx = 4, .ndim = {4, 4, 1, 3},
     .shape = {{1, 3, 18, 22}, {18, 1, 3, 3}, {18}, {1, 54, 18}}, .build = b_dwn_ex, .ia = {1, 2}},
    {.name = "dwconv_nhwc_ex_p0", .nx = 4, .ndim = {4, 4, 1, 4},
     .shape = {{1, 4, 5, 9}, {3, 1, 3, 3}, {3}, {1, 2, 3, 3}}, .build = b_dwn_ex, .ia = {0, 6}},
    {.name = "dwconv_nhwc_ex_dense_add", .nx = 4, .ndim = {4, 4, 1, 3}, /* every channel: the oneDNN kernel + r */
     .shape = {{2, 4, 5, 6}, {6, 1, 3, 3}, {6}, {2, 20, 6}}, .build = b_dwn_ex, .ia = {1, 0}},
    /* one output pixel (batch 1, a 1x1 map: GroupMixFormer's last CPE at 32 px) with an added term over 50 channels,
     * where oneDNN 2.6.3's depthwise kernel added it wrongly (vt_gemm_conv_prim) */
    {.name = "dwconv_nhwc_ex_one_pixel_add", .nx = 4, .ndim = {4, 4, 1, 3},
     .shape = {{1, 1, 1, 50}, {50, 1, 3, 3}, {50}, {1, 1, 50}}, .build = b_dwn_ex, .ia = {1, 0}},
    {.name = "dwconv_nhwc_ex_shared", .nx = 4, .ndim = {4, 4, 1, 4},
     .shape = {{2, 4, 5, 6}, {6, 1, 3, 3}, {6}, {2, 4, 5, 6}}, .build = b_dwn_ex_shared, .ia = {1, 0}},
    /* one-column maps (CSwin's one-pixel vertical stripes) run as one-row maps with the taps transposed: a square
     * kernel over 16 + 2 channels, a 5x3 one (the transposition of a non-square kernel), a packed input plus r */
    {.name = "dwconv_nhwc_one_column", .nx = 3, .ndim = {4, 4, 1}, .shape = {{2, 9, 1, 18}, {18, 1, 3, 3}, {18}},
     .build = b_dwn, .ia = {1}},
    {.name = "dwconv_nhwc_one_column_5x3", .nx = 3, .ndim = {4, 4, 1}, .shape = {{1, 11, 1, 4}, {4, 1, 5, 3}, {4}},
     .build = b_dwn, .ia = {1}},
    {.name = "dwconv_nhwc_ex_one_column", .nx = 4, .ndim = {4, 4, 1, 3},
     .shape = {{2, 10, 1, 20}, {17, 1, 3, 3}, {17}, {2, 10, 17}}, .build = b_dwn_ex, .ia = {1, 2}},
    {.name = "dwconv_nhwc_3x3_p0", .nx = 2, .ndim = {4, 4}, .shape = {{2, 4, 5, 2}, {2, 1, 3, 3}}, .build = b_dwn,
     .ia = {0}},
    {.name = "dwconv_nhwc_C37", .nx = 3, .ndim = {4, 4, 1}, .shape = {{2, 3, 4, 37}, {37, 1, 3, 3}, {37}},
     .build = b_dwn, .ia = {1}},
    /* channels 2..30 of 33 (the reference kernels): a 16-channel strip (AVX-512), an 8-channel one and 5 channels */
    {.name = "dwconv_nhwc_ex_C29", .nx = 4, .ndim = {4, 4, 1, 3},
     .shape = {{1, 3, 10, 33}, {29, 1, 3, 3}, {29}, {1, 30, 29}}, .build = b_dwn_ex, .ia = {1, 2}},
    {.name = "dwconv_nhwc_1x3", .nx = 2, .ndim = {4, 4}, .shape = {{3, 3, 4, 4}, {4, 1, 1, 3}}, .build = b_dwn,
     .ia = {1}},
};

/* Dense 3x3 stride-1 convs on 16 channels over 6,272 output pixels (NCHW: 6,400 per image): oneDNN's Winograd
 * kernels at AVX-512, forward, dX (the forward conv of dy) and dW. They run at the default thread count (the 3-thread
 * unit run takes them on 3), the first two, whose scratch sizes matter, on 1 thread too: oneDNN threads them itself,
 * and vitc's own kernels, which take them on CPUs without AVX-512, have their thread-count paths checked on
 * conv_cases' smaller shapes. On 1, 2 and 3 threads they took 3.7 of conv_cases' 5.8 s per count (Zen 4,
 * 2026-12-06). */
static const gc_case wino_cases[] = {
    /* dX's blocked dy smaller than its dX: their scratch must not overlap */
    {.name = "conv_nhwc_winograd_narrowing", .nx = 3, .ndim = {4, 4, 1},
     .shape = {{2, 56, 56, 32}, {16, 32, 3, 3}, {16}}, .build = b_convn, .ia = {1, 1, 1}},
    /* 16 -> 128 channels: Winograd's blocked maps larger than the patches, so the backward scratch is sized for them */
    {.name = "conv_nhwc_winograd_widening", .nx = 2, .ndim = {4, 4}, .shape = {{1, 80, 80, 16}, {128, 16, 3, 3}},
     .build = b_convn, .ia = {1, 0, 1}},
    {.name = "conv_nhwc_winograd", .nx = 3, .ndim = {4, 4, 1}, .shape = {{2, 56, 56, 16}, {16, 16, 3, 3}, {16}},
     .build = b_convn, .ia = {1, 1, 1}},
    /* 16-channel groups: Winograd group by group at AVX-512 */
    {.name = "conv_nhwc_winograd_groups", .nx = 3, .ndim = {4, 4, 1}, .shape = {{2, 56, 56, 32}, {32, 16, 3, 3}, {32}},
     .build = b_convn, .ia = {1, 1, 2}},
    {.name = "conv_winograd_groups", .nx = 2, .ndim = {4, 4}, .shape = {{2, 32, 80, 80}, {48, 16, 3, 3}},
     .build = b_conv, .ia = {1, 1, 2}},
    {.name = "conv_winograd", .nx = 3, .ndim = {4, 4, 1}, .shape = {{2, 16, 80, 80}, {16, 16, 3, 3}, {16}},
     .build = b_conv, .ia = {1, 1, 1}},
};

static const gc_case other_cases[] = {
    {.name = "mean_tokens", .nx = 1, .ndim = {3}, .shape = {{2, 3, 4}}, .build = b_mean, .ia = {1}},
    {.name = "mean_axis0", .nx = 1, .ndim = {2}, .shape = {{3, 5}}, .build = b_mean, .ia = {0}},
    {.name = "mean_last", .nx = 1, .ndim = {3}, .shape = {{2, 3, 4}}, .build = b_mean, .ia = {-1}},
    {.name = "mean_1d_to_scalar", .nx = 1, .ndim = {1}, .shape = {{5}}, .build = b_mean, .ia = {0}},
    {.name = "mean_wide", .nx = 1, .ndim = {3}, .shape = {{1, 3, 300}}, .build = b_mean, .ia = {1}},
    {.name = "avgpool_3_1_1", .nx = 1, .ndim = {4}, .shape = {{2, 3, 5, 7}}, .build = b_avgpool_ex,
     .ia = {3, 1, 1, 0, 1, 0}},
    {.name = "avgpool_2_2_odd", .nx = 1, .ndim = {4}, .shape = {{1, 2, 7, 5}}, .build = b_avgpool_ex,
     .ia = {2, 2, 0, 0, 1, 0}},
    {.name = "avgpool_3_2_1", .nx = 1, .ndim = {4}, .shape = {{1, 2, 6, 5}}, .build = b_avgpool_ex,
     .ia = {3, 2, 1, 0, 1, 0}},
    {.name = "avgpool_ceil_excl_odd", .nx = 1, .ndim = {4}, .shape = {{2, 3, 5, 7}}, .build = b_avgpool_ex,
     .ia = {2, 2, 0, 1, 0, 0}},
    {.name = "avgpool_ceil_excl_nhwc", .nx = 1, .ndim = {4}, .shape = {{2, 5, 3, 4}}, .build = b_avgpool_ex,
     .ia = {2, 2, 0, 1, 0, 1}},
    {.name = "avgpool_ceil_incl_pad_nhwc", .nx = 1, .ndim = {4}, .shape = {{1, 6, 5, 3}}, .build = b_avgpool_ex,
     .ia = {3, 2, 1, 1, 1, 1}},
    {.name = "avgpool_ceil_one_row", .nx = 1, .ndim = {4}, .shape = {{2, 3, 1, 5}}, .build = b_avgpool_ex,
     .ia = {2, 2, 0, 1, 0, 0}},
    {.name = "avgpool_ceil_one_row_nhwc", .nx = 1, .ndim = {4}, .shape = {{1, 1, 4, 3}}, .build = b_avgpool_ex,
     .ia = {2, 2, 0, 1, 0, 1}},
    {.name = "avgpool_overlap_excl_pad", .nx = 1, .ndim = {4}, .shape = {{2, 2, 5, 6}}, .build = b_avgpool_ex,
     .ia = {3, 2, 1, 1, 0, 0}},
    {.name = "concat_axis0", .nx = 3, .ndim = {3, 3, 3}, .shape = {{2, 3, 4}, {1, 3, 4}, {3, 3, 4}},
     .build = b_concat, .ia = {0}},
    {.name = "concat_axis1", .nx = 2, .ndim = {3, 3}, .shape = {{2, 3, 4}, {2, 1, 4}}, .build = b_concat,
     .ia = {1}},
    {.name = "concat_last", .nx = 3, .ndim = {3, 3, 3}, .shape = {{2, 3, 4}, {2, 3, 2}, {2, 3, 1}},
     .build = b_concat, .ia = {-1}},
    {.name = "slice_end", .nx = 1, .ndim = {3}, .shape = {{2, 5, 3}}, .build = b_slice, .ia = {1, 3, 2}},
    {.name = "slice_axis0", .nx = 1, .ndim = {3}, .shape = {{3, 2, 3}}, .build = b_slice, .ia = {0, 0, 1}},
    {.name = "slice_last", .nx = 1, .ndim = {2}, .shape = {{3, 4}}, .build = b_slice, .ia = {1, 2, 2}},
    {.name = "permute_021", .nx = 1, .ndim = {3}, .shape = {{2, 3, 5}}, .build = b_permute, .ia = {0, 2, 1}},
    {.name = "permute_0213", .nx = 1, .ndim = {4}, .shape = {{2, 3, 4, 5}}, .build = b_permute,
     .ia = {0, 2, 1, 3}},
    {.name = "permute_0231", .nx = 1, .ndim = {4}, .shape = {{2, 3, 4, 5}}, .build = b_permute,
     .ia = {0, 2, 3, 1}},
    {.name = "permute_3102", .nx = 1, .ndim = {4}, .shape = {{2, 3, 4, 5}}, .build = b_permute,
     .ia = {3, 1, 0, 2}},
    {.name = "permute_5d", .nx = 1, .ndim = {5}, .shape = {{2, 3, 1, 4, 5}}, .build = b_permute,
     .ia = {0, 3, 1, 4, 2}},
    {.name = "permute_5d_big", .nx = 1, .ndim = {5}, .shape = {{2, 3, 40, 2, 35}}, .build = b_permute,
     .ia = {4, 2, 0, 3, 1}},
    {.name = "permute_slice_gma", .nx = 1, .ndim = {5}, .shape = {{2, 6, 3, 5, 2}}, .build = b_permute_slice,
     .ia = {2, 0, 3, 4, 1, 3, 2, 1}},
    {.name = "permute_slice_rows", .nx = 1, .ndim = {3}, .shape = {{2, 5, 3}}, .build = b_permute_slice,
     .ia = {1, 0, 2, 1, 1, 3}},
    {.name = "permute_slice_inner", .nx = 1, .ndim = {4}, .shape = {{2, 3, 4, 9}}, .build = b_permute_slice,
     .ia = {0, 3, 1, 2, 3, 2, 5}},
    {.name = "permute_slice_tiles", .nx = 1, .ndim = {4}, .shape = {{1, 40, 2, 35}}, .build = b_permute_slice,
     .ia = {0, 3, 2, 1, 1, 4, 34}},
    {.name = "split_heads", .nx = 1, .ndim = {3}, .shape = {{2, 3, 20}}, .build = b_split, .ia = {4, 2, 5}},
    {.name = "split_heads_B1_full", .nx = 1, .ndim = {3}, .shape = {{1, 1, 6}}, .build = b_split, .ia = {0, 3, 2}},
    {.name = "merge_heads", .nx = 1, .ndim = {4}, .shape = {{2, 3, 4, 5}}, .build = b_merge},
    {.name = "prepend_tokens", .nx = 2, .ndim = {3, 3}, .shape = {{2, 3, 4}, {1, 2, 4}}, .build = b_prepend},
    {.name = "prepend_tokens_B1", .nx = 2, .ndim = {3, 3}, .shape = {{1, 1, 3}, {1, 1, 3}}, .build = b_prepend},
    {.name = "prepend_tokens_B3", .nx = 2, .ndim = {3, 3}, .shape = {{3, 2, 2}, {1, 1, 2}}, .build = b_prepend},
    {.name = "concat_permute_reuse", .nx = 2, .ndim = {3, 3}, .shape = {{2, 3, 4}, {2, 2, 4}},
     .build = b_concat_permute_reuse},
    {.name = "slice_views", .nx = 2, .ndim = {3, 2}, .shape = {{3, 4, 5}, {3, 5}}, .build = b_slice_views},
    {.name = "shape_chain", .nx = 1, .ndim = {3}, .shape = {{2, 3, 8}}, .build = b_chain},
};

/* One eval graph of a single conv on the GEMM plan of lib ("onednn", "auto", ...; ref: vt_graph.ref_kernels), x filled
 * with a fixed pattern: the output (malloc'd, or NULL), the arena's bytes and what the conv node was planned with. */
typedef struct {
    float *out;
    int64_t bytes;
    const char *kern; /* the node's kernel, NULL: the reference */
    int im2col_left_out, u8_scratch; /* the reference's forward scratch not planned; a planned u8 kernel scratch */
} plan_run;

/* Builds the conv on x; cfg: the caller's geometry. */
typedef vt_tensor *(*conv_build)(vt_graph *g, vt_tensor *x, const int *cfg);

static plan_run run_plan_on(vt_test *T, const char *lib, int ref, const int xs[4], conv_build build, const int *cfg) {
    plan_run r = {0};
    vt_err e = {0};
    vt_params *P = vt_params_new(&e);
    vt_graph *g = vt_graph_new(P, 0, &e);
    vt_gemm_plan_free(&g->gemm); /* no primitive was made from it yet */
    vt_gemm_plan_init(&g->gemm, lib, &e);
    g->ref_kernels = ref;
    vt_tensor *x = vt_input(g, "x", 4, xs), *y = build(g, x, cfg);
    vt_graph_output(g, y);
    T_CHECK(T, vt_graph_finalize(g, &e) == 0, "finalize: %s", e.msg);
    if (!e.msg[0]) {
        const vt_node *n = g->nodes[g->nn - 1];
        r.kern = n->kern ? n->kern->name : NULL;
        r.im2col_left_out = n->fws && !n->fws->data;
        r.u8_scratch = n->kws && n->kws->dtype == VT_U8 && n->kws->data;
        vt_params_init(P, 4);
        for (int64_t i = 0; i < x->numel; i++) x->data[i] = (float)(i % 13) / 13.0f - 0.5f;
        vt_graph_forward(g);
        r.bytes = vt_graph_arena_bytes(g);
        r.out = malloc(sizeof(float) * (size_t)y->numel);
        if (r.out) memcpy(r.out, y->data, sizeof(float) * (size_t)y->numel);
    }
    vt_graph_free(g);
    vt_params_free(P);
    return r;
}

/* run_plan_on a forced oneDNN plan. */
static plan_run run_plan(vt_test *T, int ref, const int xs[4], conv_build build, const int *cfg) {
    return run_plan_on(T, "onednn", ref, xs, build, cfg);
}

/* Largest |a - b| over n floats; *scale gets the largest |b|. */
static double max_diff(const float *a, const float *b, int64_t n, double *scale) {
    double err = 0.0, mx = 0.0;
    for (int64_t i = 0; i < n; i++) {
        err = t_worse(err, fabs(a[i] - b[i]));
        mx = fmax(mx, fabs(b[i]));
    }
    *scale = mx;
    return err;
}

static vt_tensor *b_plan_nhwc(vt_graph *g, vt_tensor *x, const int *cfg) {
    (void)cfg;
    const int ws[4] = {64, 64, 3, 3};
    return vt_conv2d_nhwc(g, x, vt_param(g, "w", 4, ws, (vt_init){VT_INIT_NORMAL, 0.05f}), NULL, 1, 1, 1);
}

/* The plan of an eval conv_nhwc (3×3, 64 channels, 2 × 28²): with the oneDNN kernel the reference's im2col scratch
 * (B·H·W·C·9 floats) is left out, so the arena is that much smaller than with ref_kernels (less the blocked x and y
 * a Winograd kernel would plan, 2·B·H·W·C floats); both give one result. */
static void check_conv_nhwc_plan(vt_test *T) {
    const int xs[4] = {2, 28, 28, 64};
    const plan_run k = run_plan(T, 0, xs, b_plan_nhwc, NULL), r = run_plan(T, 1, xs, b_plan_nhwc, NULL);
    if (k.kern) T_CHECK(T, k.im2col_left_out, "oneDNN conv: the im2col scratch was planned");
    const int64_t cols = (int64_t)2 * 28 * 28 * 64 * 9 * 4, blocked = (int64_t)2 * 2 * 28 * 28 * 64 * 4;
    if (k.kern)
        T_CHECK(T, k.bytes + cols <= r.bytes + blocked,
                "arena with the oneDNN conv %lld B, reference %lld B (im2col %lld B)", (long long)k.bytes,
                (long long)r.bytes, (long long)cols);
    if (k.out && r.out) {
        double mx, err = max_diff(k.out, r.out, 2 * 28 * 28 * 64, &mx);
        T_CHECK(T, err < 1e-4, "oneDNN conv vs reference: %g", err);
    }
    free(k.out);
    free(r.out);
}

/* cfg: c0, L (x's channels per pixel), then 1 add r, 2 GELU fused (vt_dwconv_nhwc_gelu), 3 GELU as its own op */
static vt_tensor *b_plan_dwn(vt_graph *g, vt_tensor *x, const int *f) {
    const int C = 24, ws[4] = {C, 1, 3, 3}, rs[4] = {2, 14, 14, C};
    vt_tensor *r = f[2] == 1 ? vt_param(g, "r", 4, rs, (vt_init){VT_INIT_NORMAL, 1.0f}) : NULL;
    vt_tensor *w = vt_param(g, "w", 4, ws, (vt_init){VT_INIT_NORMAL, 0.2f});
    vt_tensor *b = vt_param(g, "b", 1, &C, (vt_init){VT_INIT_NORMAL, 0.2f});
    if (f[2] == 2) return vt_dwconv_nhwc_gelu(g, x, w, b, 1);
    vt_tensor *y = vt_dwconv_nhwc_ex(g, x, f[0], w, b, 1, r);
    return f[2] == 3 ? vt_gelu(g, y) : y;
}

/* dwconv_nhwc on a forced oneDNN plan: a plain map (with or without the added term, or GELU fused) runs the oneDNN
 * depthwise convolution, channels read from a wider map keep this file's kernel; both equal the reference's output,
 * and the fused GELU (either kernel) equals the conv followed by the GELU op. */
static void check_dwconv_nhwc_onednn(vt_test *T) {
    static const int cfg[4][3] = {{0, 24, 0}, {0, 24, 1}, {5, 32, 0}, {0, 24, 2}}; /* c0, L, add / GELU */
    static const int chain[3] = {0, 24, 3};
    const int64_t ny = (int64_t)2 * 14 * 14 * 24;
    for (int c = 0; c < 4; c++) {
        const int *f = cfg[c], xs[4] = {2, 14, 14, f[1]};
        const plan_run k = run_plan(T, 0, xs, b_plan_dwn, f), r = run_plan(T, 1, xs, b_plan_dwn, f);
        if (c != 2) T_CHECK(T, k.kern && strcmp(k.kern, "dwconv_nhwc.onednn") == 0, "dwconv_nhwc cfg %d: kernel %s",
                            c, k.kern ? k.kern : "none (reference)");
        else T_CHECK(T, !k.kern, "dwconv_nhwc cfg %d: kernel %s on an offset input", c, k.kern);
        if (k.out && r.out) {
            double mx, err = max_diff(k.out, r.out, ny, &mx);
            T_CHECK(T, mx > 0.0 && err <= 1e-5 * mx, "dwconv_nhwc cfg %d vs reference: %g of %g", c, err, mx);
        }
        if (c == 3) { /* also the automatic plan, which keeps this file's kernel for GELU on AVX-512 */
            const plan_run p = run_plan(T, 1, xs, b_plan_dwn, chain), a = run_plan_on(T, "auto", 0, xs, b_plan_dwn, f);
            double mx = 0.0, ek = 1.0, er = 1.0, ea = 1.0;
            if (p.out && k.out && r.out && a.out) {
                ek = max_diff(k.out, p.out, ny, &mx);
                er = max_diff(r.out, p.out, ny, &mx);
                ea = max_diff(a.out, p.out, ny, &mx);
            }
            const double tol = 1e-6 * fmax(1.0, mx);
            T_CHECK(T, mx > 0.0 && ek <= tol && er <= tol && ea <= tol,
                    "dwconv_nhwc_gelu vs dwconv_nhwc + gelu: oneDNN %g, reference %g, automatic plan %g of %g", ek, er,
                    ea, mx);
#ifdef __AVX512F__
            T_CHECK(T, !a.kern, "dwconv_nhwc_gelu on AVX-512, automatic plan: kernel %s", a.kern);
#endif
            free(p.out);
            free(a.out);
        }
        free(k.out);
        free(r.out);
    }
}

/* cfg[0]: 1 the depthwise 3x3 with GELU fused (vt_dwconv_nhwc_gelu), 0 the conv and then the GELU op; C from x. */
static vt_tensor *b_dwn_gelu_c(vt_graph *g, vt_tensor *x, const int *f) {
    const int C = x->shape[3], ws[4] = {C, 1, 3, 3};
    vt_tensor *w = vt_param(g, "w", 4, ws, (vt_init){VT_INIT_NORMAL, 0.3f});
    vt_tensor *b = vt_param(g, "b", 1, &C, (vt_init){VT_INIT_NORMAL, 0.3f});
    return f[0] ? vt_dwconv_nhwc_gelu(g, x, w, b, 1) : vt_gelu(g, vt_dwconv_nhwc(g, x, w, b, 1));
}

/* The fused GELU on whole 16-channel strips (dwn_fwd: GELU in registers; from 2^24 outputs streaming stores), on
 * the automatic plan, against the conv followed by the GELU op; a channel count off the strips (40) too. */
static void check_dwconv_gelu_strips(vt_test *T) {
    static const int xs[3][4] = {{2, 9, 7, 32}, {2, 6, 5, 40}, {1, 256, 256, 256}};
    static const int fused[1] = {1}, chain[1] = {0};
    for (int c = 0; c < 3; c++) {
        const int64_t ny = (int64_t)xs[c][0] * xs[c][1] * xs[c][2] * xs[c][3];
        const plan_run k = run_plan_on(T, "auto", 0, xs[c], b_dwn_gelu_c, fused);
        const plan_run r = run_plan_on(T, "auto", 0, xs[c], b_dwn_gelu_c, chain);
        double mx = 0.0, err = 1.0;
        if (k.out && r.out) err = max_diff(k.out, r.out, ny, &mx);
        T_CHECK(T, mx > 0.0 && err <= 1e-5 * fmax(1.0, mx), "dwconv_nhwc_gelu %dx%dx%dx%d vs conv + gelu: %g of %g",
                xs[c][0], xs[c][1], xs[c][2], xs[c][3], err, mx);
        free(k.out);
        free(r.out);
    }
}

/* cfg: B, Cin, H, Cout, k, s, p */
static vt_tensor *b_plan_nchw(vt_graph *g, vt_tensor *x, const int *f) {
    const int ws[4] = {f[3], f[1], f[4], f[4]};
    return vt_conv2d(g, x, vt_param(g, "w", 4, ws, (vt_init){VT_INIT_NORMAL, 0.1f}),
                     vt_param(g, "b", 1, &f[3], (vt_init){VT_INIT_NORMAL, 0.1f}), f[5], f[6], 1);
}

/* NCHW conv2d's oneDNN kernel (forced oneDNN plan): taken for stride-1 convs, overlapping 3-channel first layers and
 * an overlapping stride-2 conv on 16 channels (on the default plan only at oneDNN's AVX-512 tier), not for a
 * non-overlapping 3-channel patch embed (see conv.c); where taken, the reference's im2col scratch is not planned, the
 * blocked x / y scratch is, and the result equals the reference's. */
static void check_conv2d_onednn(vt_test *T) {
    static const int cfg[][7] = {/* B, Cin, H, Cout, k, s, p */ {2, 16, 19, 24, 3, 1, 1}, {3, 3, 21, 8, 7, 4, 3},
                                 {2, 16, 12, 8, 3, 2, 1}, {2, 3, 16, 8, 4, 4, 0}};
    vt_err e = {0};
    vt_gemm_plan auto_plan = {0};
    T_CHECK(T, vt_gemm_plan_init(&auto_plan, "auto", &e) == 0, "auto plan: %s", e.msg);
    const int tier512 = auto_plan.onednn >= VT_ISA_AVX512 && auto_plan.openblas <= auto_plan.onednn;
    vt_gemm_plan_free(&auto_plan);
    for (int c = 0; c < 4; c++) {
        const int *f = cfg[c], Ho = (f[2] + 2 * f[6] - f[4]) / f[5] + 1, xs[4] = {f[0], f[1], f[2], f[2]};
        const plan_run k = run_plan(T, 0, xs, b_plan_nchw, f), r = run_plan(T, 1, xs, b_plan_nchw, f);
        if (c == 2) {
            T_CHECK(T, k.kern != NULL, "conv2d cfg %d: the oneDNN kernel was not taken on the oneDNN plan", c);
            const plan_run a = run_plan_on(T, "auto", 0, xs, b_plan_nchw, f);
            T_CHECK(T, (a.kern != NULL) == tier512, "conv2d cfg %d on the auto plan: kernel %s, oneDNN at AVX-512 %d", c,
                    a.kern ? a.kern : "none", tier512);
            free(a.out);
        }
        if (c == 3) T_CHECK(T, !k.kern, "conv2d cfg %d: the oneDNN kernel was taken", c);
        if (k.kern) {
            T_CHECK(T, strcmp(k.kern, "conv2d.onednn") == 0, "kernel %s", k.kern);
            T_CHECK(T, k.im2col_left_out, "conv2d cfg %d: the im2col scratch was planned", c);
            T_CHECK(T, k.u8_scratch, "conv2d cfg %d: no scratch", c);
        }
        if (k.out && r.out) {
            double mx, err = max_diff(k.out, r.out, (int64_t)f[0] * f[3] * Ho * Ho, &mx);
            T_CHECK(T, mx > 0.0 && err <= 1e-5 * mx, "conv2d cfg %d (kernel %s) vs reference: %g of %g", c,
                    k.kern ? k.kern : "none", err, mx);
        }
        free(k.out);
        free(r.out);
    }
}

/* oneDNN's Winograd kernels (conv_wino, gemm_onednn.c): on a forced oneDNN plan at its AVX-512 tier a 3x3 stride-1
 * conv with at least 16 channels in and out (per group) and 6,272 output pixels takes them, forward and weight
 * gradient, channels-last and NCHW, with its blocked x and y as scratch (a grouped one group by group: one group's);
 * a conv on fewer pixels, on 8-channel groups, a strided and an 8-channel conv do not; below AVX-512 none does. */
static void check_conv_winograd(vt_test *T) {
    vt_err e = {0};
    vt_gemm_plan p = {0};
    T_CHECK(T, vt_gemm_plan_init(&p, "onednn", &e) == 0, "onednn plan: %s", e.msg);
    const int avx512 = p.onednn >= VT_ISA_AVX512;
    static const int cfg[][7] = {/* C, Cout, stride, groups, nchw, H = W, Winograd */
                                 {16, 32, 1, 1, 0, 56, 1}, {32, 16, 1, 1, 1, 56, 1}, {32, 32, 1, 1, 0, 54, 0},
                                 {32, 32, 1, 2, 0, 12, 0}, {32, 32, 1, 2, 0, 56, 1}, {32, 48, 1, 2, 1, 56, 1},
                                 {64, 64, 1, 8, 0, 56, 0}, {16, 32, 2, 1, 0, 56, 0}, {8, 32, 1, 1, 0, 56, 0},
                                 {32, 8, 1, 1, 1, 56, 0}};
    for (int c = 0; c < 10; c++) {
        const int *f = cfg[c], H = f[5];
        vt_gemm_conv *q = vt_gemm_conv_prim(&p, 2, f[0], H, H, f[1], 3, f[2], 1, f[3], VT_CONV_BIAS, f[4]);
        T_CHECK(T, q != NULL, "conv %d: no oneDNN conv on the oneDNN plan", c);
        if (!q) continue;
        const int wino = strstr(vt_gemm_conv_impl(q), "wino") != NULL;
        T_CHECK(T, wino == (f[6] && avx512), "conv %d (%d -> %d channels, stride %d, %d groups): kernel %s", c, f[0],
                f[1], f[2], f[3], vt_gemm_conv_impl(q));
        if (wino) { /* the blocked x and y (of one group); a run without them is refused, nothing read or written */
            T_CHECK(T, vt_gemm_conv_scratch(q) >= sizeof(float) * 2 * (size_t)(H * H) * (size_t)(f[0] + f[1]) / f[3],
                    "conv %d: scratch %zu B", c, vt_gemm_conv_scratch(q));
            T_CHECK(T, vt_gemm_conv_run(q, NULL, NULL, NULL, NULL, NULL, 1) == -1, "conv %d ran without scratch", c);
        }
        vt_gemm_conv *qw = vt_gemm_conv_wgrad(&p, 2, f[0], H, H, f[1], 3, f[2], 1, f[3], f[4]);
        T_CHECK(T, qw != NULL, "conv %d: no weight-gradient conv on the oneDNN plan", c);
        if (qw)
            T_CHECK(T, (strstr(vt_gemm_conv_impl(qw), "wino") != NULL) == (f[6] && avx512),
                    "conv %d's weight gradient: kernel %s", c, vt_gemm_conv_impl(qw));
    }
    vt_gemm_plan_free(&p);
}

/* Slices whose few chunks are long enough to be copied in pieces by several threads (slice_pieces): values and the
 * gradient (r on the sliced range, zero elsewhere) for one chunk of 100,100 floats and two of 90,030. */
static void check_slice_pieces(vt_test *T) {
    const int shapes[2][3] = {{3, 100, 1001}, {2, 50, 3001}}, axis[2] = {0, 1}, start[2] = {1, 10}, len[2] = {1, 30};
    for (int c = 0; c < 2; c++) {
        vt_err e = {0};
        vt_params *P = vt_params_new(&e);
        vt_graph *g = vt_graph_new(P, 1, &e);
        vt_tensor *x = vt_param(g, "x", 3, shapes[c], (vt_init){VT_INIT_NORMAL, 1.0f});
        vt_tensor *y = vt_slice(g, x, axis[c], start[c], len[c]);
        vt_tensor *r = y ? vt_input(g, "r", 3, y->shape) : NULL;
        vt_graph_set_loss(g, vt_sum(g, vt_mul(g, y, r)));
        vt_graph_output(g, y);
        T_CHECK(T, vt_graph_finalize(g, &e) == 0, "slice pieces: %s", e.msg);
        if (!e.msg[0]) {
            vt_params_init(P, 3 + (uint64_t)c);
            for (int64_t i = 0; i < r->numel; i++) r->data[i] = (float)(i % 7) - 3.0f;
            vt_graph_forward(g);
            vt_params_zero_grad(P);
            vt_graph_backward(g);
            const int A = shapes[c][axis[c]], inner = axis[c] ? shapes[c][2] : shapes[c][1] * shapes[c][2];
            const int outer = axis[c] ? shapes[c][0] : 1;
            int64_t bad = 0;
            for (int o = 0; o < outer; o++)
                for (int a = 0; a < A; a++)
                    for (int i = 0; i < inner; i++) {
                        const int64_t xi = ((int64_t)o * A + a) * inner + i;
                        const int in = a >= start[c] && a < start[c] + len[c];
                        const int64_t yi = ((int64_t)o * len[c] + (a - start[c])) * inner + i;
                        bad += in ? (y->data[yi] != x->data[xi] || x->grad[xi] != r->data[yi]) : x->grad[xi] != 0.0f;
                    }
            T_CHECK(T, bad == 0, "slice pieces case %d: %lld wrong values or gradients", c, (long long)bad);
        }
        vt_graph_free(g);
        vt_params_free(P);
    }
}

void test_ops_conv_shape(vt_test *T) {
    check_conv_nhwc_plan(T);
    check_slice_pieces(T);
    check_conv_values(T);
    check_conv_relu_chain(T);
    check_conv_nhwc_values(T);
    check_conv_nhwc_rows_train(T);
    check_dwconv_nhwc_values(T);
    check_conv2d_onednn(T);
    check_conv_winograd(T);
    check_dwconv_nhwc_onednn(T);
    check_dwconv_gelu_strips(T);
    check_pool_values(T);
    check_shape_values(T);
    check_errors(T);
    /* conv kernels pick image-parallel or BLAS-parallel paths by thread count: check both */
    const int saved = omp_get_max_threads(), threads[4] = {1, 2, 3, saved}, counts = saved > 3 ? 4 : 3;
    for (int t = 0; t < counts; t++) { /* the default count too, unless one of those */
        omp_set_num_threads(threads[t]);
        for (size_t i = 0; i < sizeof conv_cases / sizeof conv_cases[0]; i++) gc_run(T, &conv_cases[i]);
    }
    omp_set_num_threads(1); /* the two scratch-sizing cases on 1 thread too (scratch depends on the thread count) */
    for (size_t i = 0; i < 2 && saved > 1; i++) gc_run(T, &wino_cases[i]);
    omp_set_num_threads(saved);
    for (size_t i = 0; i < sizeof wino_cases / sizeof wino_cases[0]; i++) gc_run(T, &wino_cases[i]);
    for (size_t i = 0; i < sizeof other_cases / sizeof other_cases[0]; i++) gc_run(T, &other_cases[i]);
}
