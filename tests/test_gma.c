/* GMA (GroupMixFormer) block: finite-difference gradients of every parameter and the input through the whole
 * block in train mode (BatchNorm batch statistics over the 3B stacked Q/K/V images), on a non-square grid, plus
 * the shape errors. The PyTorch comparison is tests/reference/test_gma.py. */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "gradcheck.h"
#include "test.h"
#include "vitc/blocks.h"
#include "vitc/model.h"
#include "vitc/ops.h"

/* Central differences over sampled elements of every parameter (the input x is a parameter too), each taken as the
 * nearest of the central and the two one-sided differences: the aggregators' Hardswish has kinks at ±3, and with
 * BatchNorm over the batch one weight moves every input of its channel, so where one input sits near a kink the
 * central differences of the weights feeding that channel straddle it (with one init, 2026-12-06: qkv.weight and
 * agg2's weights at 3-7e-2 of the scale, shrinking with eps; every other sample within 1.1e-2), while the side
 * without the kink matches (all within 6.2e-3). */
static void check_block_grad(vt_test *T, const char *tag, int attn_only, int B, int H, int W, int C) {
    vt_err e = {0};
    vt_params *P = vt_params_new(&e);
    vt_graph *g = vt_graph_new(P, 1, &e);
    int xs[3] = {B, H * W, C};
    vt_tensor *x = vt_param(g, "x", 3, xs, (vt_init){VT_INIT_NORMAL, 1.0f});
    vt_tensor *y = attn_only ? vt_block_gma_attn(g, "att", x, H, W) : vt_block_gma(g, "blk", x, H, W, 2 * C, 0.0f);
    vt_tensor *r = vt_input(g, "r", 3, xs);
    vt_graph_set_loss(g, vt_sum(g, vt_mul(g, y, r)));
    vt_graph_output(g, y);
    if (vt_graph_finalize(g, &e) || vt_params_alloc_grads(P, &e)) {
        T_CHECK(T, 0, "%s: build failed: %s", tag, e.msg);
        vt_graph_free(g);
        vt_params_free(P);
        return;
    }
    vt_params_init(P, 7);
    vt_rng rng;
    vt_rng_seed(&rng, 3);
    for (int i = 0; i < P->n; i++) { /* larger weights (non-flat softmax), non-trivial norm affines */
        vt_tensor *t = P->t[i];
        if (t->kind != VT_PARAM) continue;
        for (int64_t j = 0; j < t->numel; j++)
            t->data[j] = t->ndim == 1 ? t->data[j] + 0.3f * vt_rng_normal(&rng)
                                      : (t->ndim == 2 && strcmp(t->name, "x") ? 4.0f : 1.0f) * t->data[j];
    }
    for (int64_t j = 0; j < r->numel; j++) r->data[j] = vt_rng_normal(&rng);
    vt_graph_forward(g);
    vt_params_zero_grad(P);
    vt_graph_backward(g);
    for (int i = 0; i < P->n; i++) {
        vt_tensor *t = P->t[i];
        if (t->kind != VT_PARAM) continue;
        double anysum = 0;
        const double rel = gc_param_error(g, t, y, r->data, 24, 3e-3f, 1, &anysum); /* Hardswish's kinks */
        T_CHECK(T, rel < 2e-2, "%s: %s rel err %.3g", tag, t->name, rel);
        T_CHECK(T, anysum > 0, "%s: %s gradient is all zero", tag, t->name);
    }
    vt_graph_free(g);
    vt_params_free(P);
}

static vt_tensor *b_gma_attn(vt_graph *g, vt_tensor *x, const void *ctx) {
    const int *hw = ctx;
    return vt_block_gma_attn(g, "att", x, hw[0], hw[1]);
}

/* The fused inference aggregators against the op chain they replace. */
static void check_eval_fused(vt_test *T, int B, int H, int W, int C) {
    char tag[64];
    snprintf(tag, sizeof tag, "gma eval %dx(%dx%d) C%d", B, H, W, C);
    const int xs[3] = {B, H * W, C}, hw[2] = {H, W};
    gc_compare_eval_fused(T, tag, 3, xs, b_gma_attn, hw, "gma_aggregate", 1e-5);
}

/* Operands f, q (B, A, N), u (B, T, N), v (B, A, H, W), then every CRPE group's weights (c_j·k_j² floats each) and
 * biases (c_j), each packed in one operand; ia = {nv, H, W, c_0, c_1, c_2, k_0·100 + k_1·10 + k_2}. Group j's
 * weight (c_j, 1, k_j, k_j) and bias are slices of them into *w and *b. */
static void merge_groups(vt_graph *g, vt_tensor **x, const gc_case *c, vt_tensor **w, vt_tensor **b) {
    int wo = 0, bo = 0;
    for (int j = 0; j < c->ia[0]; j++) {
        const int cj = c->ia[3 + j], k = c->ia[6] / (j == 0 ? 100 : j == 1 ? 10 : 1) % 10, ws[4] = {cj, 1, k, k};
        w[j] = vt_reshape(g, vt_slice(g, x[4], 0, wo, cj * k * k), 4, ws);
        b[j] = vt_slice(g, x[5], 0, bo, cj);
        wo += cj * k * k;
        bo += cj;
    }
}

static vt_tensor *b_merge(vt_graph *g, vt_tensor **x, const gc_case *c) {
    vt_tensor *w[3], *b[3];
    merge_groups(g, x, c, w, b);
    const int sv[3] = {x[0]->shape[0], x[0]->shape[1], x[0]->shape[2]};
    return vt_gma_merge(g, x[0], x[1], vt_reshape(g, x[3], 3, sv), c->ia[1], c->ia[2], w, b, c->ia[0], x[2]);
}

/* The op chain vt_gma_merge replaces: each group's depthwise conv on its sliced channels, then concat([permute(f + q
 * ⊙ concat(convs)), permute(u)]). */
static vt_tensor *b_merge_chain(vt_graph *g, vt_tensor **x, const gc_case *c) {
    const int perm[3] = {0, 2, 1};
    vt_tensor *w[3], *b[3], *vc[3];
    merge_groups(g, x, c, w, b);
    for (int j = 0, c0 = 0; j < c->ia[0]; j++) {
        const int cj = c->ia[3 + j], k = w[j]->shape[2];
        vc[j] = vt_conv2d(g, vt_slice(g, x[3], 1, c0, cj), w[j], b[j], 1, k / 2, cj);
        c0 += cj;
    }
    vt_tensor *v = vt_reshape(g, vt_concat(g, vc, c->ia[0], 1), 3, x[0]->shape);
    vt_tensor *o[2] = {vt_permute(g, vt_add(g, x[0], vt_mul(g, x[1], v)), perm), vt_permute(g, x[2], perm)};
    return vt_concat(g, o, 2, 2);
}

/* vt_gma_merge's gradients by finite differences and its values and gradients against the chain: A channels in
 * CRPE groups of kernel sizes ks (digits; a group across an 8-channel tile, A not a multiple of 8), an H×W grid
 * (a partial 8-token tile, planes wider than a 16-float block, taller than an 8-row tile), T tail channels. */
static void check_merge(vt_test *T, int B, int H, int W, int Tc, int nv, const int *vc, int ks) {
    int A = 0, nw = 0;
    for (int j = 0; j < nv; j++) {
        const int k = ks / (j == 0 ? 100 : j == 1 ? 10 : 1) % 10;
        A += vc[j];
        nw += vc[j] * k * k;
    }
    gc_case f = {.name = "gma_merge", .nx = 6, .ndim = {3, 3, 3, 4, 1, 1}, .build = b_merge,
                 .ia = {nv, H, W, vc[0], nv > 1 ? vc[1] : 0, nv > 2 ? vc[2] : 0, ks}};
    const int fs[3] = {B, A, H * W}, us[3] = {B, Tc, H * W}, vs[4] = {B, A, H, W};
    memcpy(f.shape[0], fs, sizeof fs);
    memcpy(f.shape[1], fs, sizeof fs);
    memcpy(f.shape[2], us, sizeof us);
    memcpy(f.shape[3], vs, sizeof vs);
    f.shape[4][0] = nw;
    f.shape[5][0] = A;
    gc_run_vs_plain(T, &f, b_merge_chain, "depthwise convs, mul, add, permutes and concats", 1e-5);
}

/* A 5-image merge (groups 3×3, 5×5, 7×7 over 4, 6, 6 channels, u of 4 channels, a 6×7 grid) on `threads` threads,
 * the op (chain 0) or the chain it replaces: operand k (b_merge's order) a parameter where bit k of params is set,
 * else an input without a gradient; its output, then the parameters' gradients, into out (n floats; -1 when they do
 * not fill it or on a build error). */
static int merge_run(int threads, unsigned params, int chain, float *out, int64_t n) {
    const int t0 = omp_get_max_threads();
    omp_set_num_threads(threads);
    vt_err e = {0};
    vt_params *P = vt_params_new(&e);
    vt_graph *g = P ? vt_graph_new(P, 1, &e) : NULL;
    int rc = -1;
    if (g) {
        const int nw = 4 * 9 + 6 * 25 + 6 * 49, nb = 16;
        const int sh[6][4] = {{5, 16, 42}, {5, 16, 42}, {5, 4, 42}, {5, 16, 6, 7}, {nw}, {nb}};
        const int nd[6] = {3, 3, 3, 4, 1, 1};
        const gc_case c = {.ia = {3, 6, 7, 4, 6, 6, 357}};
        vt_tensor *x[6];
        for (int k = 0; k < 6; k++) {
            char nm[8];
            snprintf(nm, sizeof nm, "x%d", k);
            x[k] = params >> k & 1 ? vt_param(g, nm, nd[k], sh[k], (vt_init){VT_INIT_ZERO, 0})
                                   : vt_input(g, nm, nd[k], sh[k]);
        }
        vt_tensor *y = chain ? b_merge_chain(g, x, &c) : b_merge(g, x, &c);
        vt_tensor *r = y ? vt_input(g, "r", 3, y->shape) : NULL;
        if (r) {
            vt_graph_set_loss(g, vt_sum(g, vt_mul(g, y, r)));
            vt_graph_output(g, y); /* kept to the end of the run, read after backward */
        }
        if (r && !vt_graph_finalize(g, &e) && !vt_params_alloc_grads(P, &e)) {
            vt_rng rng;
            vt_rng_seed(&rng, 5);
            for (int k = 0; k < 6; k++)
                for (int64_t j = 0; j < x[k]->numel; j++) x[k]->data[j] = vt_rng_normal(&rng);
            for (int64_t j = 0; j < r->numel; j++) r->data[j] = vt_rng_normal(&rng);
            vt_graph_forward(g);
            vt_params_zero_grad(P);
            vt_graph_backward(g);
            int64_t o = y->numel;
            if (o <= n) memcpy(out, y->data, sizeof(float) * (size_t)o);
            for (int k = 0; k < 6 && o <= n; k++) {
                if (!(params >> k & 1)) continue;
                if (o + x[k]->numel <= n) memcpy(out + o, x[k]->grad, sizeof(float) * (size_t)x[k]->numel);
                o += x[k]->numel;
            }
            rc = o == n ? 0 : -1;
        }
    }
    vt_graph_free(g);
    vt_params_free(P);
    omp_set_num_threads(t0);
    return rc;
}

/* Floats of merge_run's output for parameters params. */
static int64_t merge_floats(unsigned params) {
    const int64_t sz[6] = {5 * 16 * 42, 5 * 16 * 42, 5 * 4 * 42, 5 * 16 * 42, 4 * 9 + 6 * 25 + 6 * 49, 16};
    int64_t n = 5 * 42 * 20;
    for (int k = 0; k < 6; k++) n += params >> k & 1 ? sz[k] : 0;
    return n;
}

/* The merge where only some operands have gradients (the others inputs: their gradients NULL in the op), against the
 * chain: v and the CRPE's parameters alone (no df, dq, du); the biases alone from the CRPE (f, q, u too; no dv, dW);
 * the weights without v's or the biases'. Then all six, the same floats on 1, 2 and 3 threads (each image's weight
 * and bias sums apart, added in image order; the units split over the threads in chunks and round robin). */
static void check_merge_grads(vt_test *T) {
    static const unsigned masks[3] = {0x38, 0x27, 0x17};
    for (int i = 0; i < 3; i++) {
        const int64_t n = merge_floats(masks[i]);
        float *a = malloc(sizeof(float) * (size_t)n), *b = malloc(sizeof(float) * (size_t)n);
        const int ok = a && b && merge_run(2, masks[i], 0, a, n) == 0 && merge_run(2, masks[i], 1, b, n) == 0;
        const double d = ok ? gc_rel_diff(a, b, n, 1.0) : INFINITY;
        T_CHECK(T, d < 1e-5, "gma_merge with gradients for operands 0x%x only: %g from the chain", masks[i], d);
        free(a);
        free(b);
    }
    const int64_t n = merge_floats(0x3f);
    float *g1 = malloc(sizeof(float) * (size_t)n), *g = malloc(sizeof(float) * (size_t)n);
    int ok = g1 && g && merge_run(1, 0x3f, 0, g1, n) == 0;
    for (int th = 2; ok && th <= 3; th++)
        ok = merge_run(th, 0x3f, 0, g, n) == 0 && !memcmp(g, g1, sizeof(float) * (size_t)n);
    T_CHECK(T, ok, "gma_merge: the output and gradients on 1, 2 and 3 threads are the same floats");
    free(g1);
    free(g);
}

/* Operands qkv (3C, B, H·W), dw (cin, 1, k, k), pw (s, cin, 1, 1); ia = {seg, H, W}. */
static vt_tensor *b_sep(vt_graph *g, vt_tensor **x, const gc_case *c) {
    return vt_gma_separable(g, x[0], c->ia[0], c->ia[1], c->ia[2], x[1], x[2]);
}

/* The chain vt_gma_separable replaces: the segment's planes copied out by a sliced permute, then the depthwise and
 * the pointwise conv. */
static vt_tensor *b_sep_chain(vt_graph *g, vt_tensor **x, const gc_case *c) {
    const int seg = c->ia[0], H = c->ia[1], W = c->ia[2], s = x[0]->shape[0] / 15, B = x[0]->shape[1];
    const int s5[5] = {3, 5, s, B, H * W}, pseg[5] = {0, 3, 1, 2, 4}, p4[5] = {3, 0, 1, 2, 4};
    const int sseg[4] = {3 * B, s, H, W}, s4[4] = {B, 3 * s, H, W};
    vt_tensor *t = vt_permute_slice(g, vt_reshape(g, x[0], 5, s5), seg < 4 ? pseg : p4, 1, seg, 1);
    t = vt_reshape(g, t, 4, seg < 4 ? sseg : s4);
    const int k = x[1]->shape[2];
    return vt_conv2d(g, vt_conv2d(g, t, x[1], NULL, 1, k / 2, t->shape[1]), x[2], NULL, 1, 0, 1);
}

/* y + y->numel values of qkv from segment seg's first plane on (the Q part of the segment the separable conv reads,
 * and more): those planes' gradient gets a second term besides the conv's, which must add its own. */
static vt_tensor *with_qkv_term(vt_graph *g, vt_tensor *y, vt_tensor *qkv, int seg) {
    if (vt_bad(g, 2, y, qkv)) return NULL;
    const int rows = (int)(y->numel / ((int64_t)qkv->shape[1] * qkv->shape[2]));
    return vt_add(g, y, vt_reshape(g, vt_slice(g, qkv, 0, seg * (qkv->shape[0] / 15), rows), y->ndim, y->shape));
}
static vt_tensor *b_sep_shared(vt_graph *g, vt_tensor **x, const gc_case *c) {
    return with_qkv_term(g, b_sep(g, x, c), x[0], c->ia[0]);
}
static vt_tensor *b_sep_chain_shared(vt_graph *g, vt_tensor **x, const gc_case *c) {
    return with_qkv_term(g, b_sep_chain(g, x, c), x[0], c->ia[0]);
}

/* vt_gma_separable's gradients by finite differences and its values and gradients against the chain, on segment
 * seg (1-3: the 3B images of s channels; 4: the B images of 3s) of an H×W grid with a k×k depthwise kernel; shared:
 * qkv also feeds another op (its gradient added to). */
static void check_separable(vt_test *T, int B, int s, int H, int W, int seg, int k, int shared) {
    const int cin = seg < 4 ? s : 3 * s;
    gc_case f = {.name = shared ? "gma_separable_shared" : "gma_separable", .nx = 3, .ndim = {3, 4, 4},
                 .build = shared ? b_sep_shared : b_sep, .ia = {seg, H, W}};
    const int qs[3] = {15 * s, B, H * W}, ds[4] = {cin, 1, k, k}, ps[4] = {s, cin, 1, 1};
    memcpy(f.shape[0], qs, sizeof qs);
    memcpy(f.shape[1], ds, sizeof ds);
    memcpy(f.shape[2], ps, sizeof ps);
    gc_run_vs_plain(T, &f, shared ? b_sep_chain_shared : b_sep_chain, "sliced permute, depthwise and pointwise convs",
                    1e-5);
}

/* Operands qkv (3C, B, H·W), dw1 (s, 1, 3, 3), dw2 (s, 1, 5, 5), dw3 (s, 1, 7, 7), the three pointwise weights
 * stacked (3s, s, 1, 1); ia = {H, W}. */
static vt_tensor *b_sepcat(vt_graph *g, vt_tensor **x, const gc_case *c) {
    const int s = x[0]->shape[0] / 15;
    vt_tensor *pw[3];
    for (int j = 0; j < 3; j++) pw[j] = vt_slice(g, x[4], 0, j * s, s);
    return vt_gma_separable_cat(g, x[0], c->ia[0], c->ia[1], x + 1, pw);
}

/* The chain it replaces: segment 0's planes copied out, segments 1-3 through vt_gma_separable, a concat. */
static vt_tensor *b_sepcat_chain(vt_graph *g, vt_tensor **x, const gc_case *c) {
    const int H = c->ia[0], W = c->ia[1], s = x[0]->shape[0] / 15, B = x[0]->shape[1];
    const int s5[5] = {3, 5, s, B, H * W}, pseg[5] = {0, 3, 1, 2, 4}, sseg[4] = {3 * B, s, H, W};
    vt_tensor *y[4];
    y[0] = vt_reshape(g, vt_permute_slice(g, vt_reshape(g, x[0], 5, s5), pseg, 1, 0, 1), 4, sseg);
    for (int j = 1; j <= 3; j++)
        y[j] = vt_gma_separable(g, x[0], j, H, W, x[j], vt_slice(g, x[4], 0, (j - 1) * s, s));
    return vt_concat(g, y, 4, 1);
}
static vt_tensor *b_sepcat_shared(vt_graph *g, vt_tensor **x, const gc_case *c) {
    return with_qkv_term(g, b_sepcat(g, x, c), x[0], 0);
}
static vt_tensor *b_sepcat_chain_shared(vt_graph *g, vt_tensor **x, const gc_case *c) {
    return with_qkv_term(g, b_sepcat_chain(g, x, c), x[0], 0);
}

/* vt_gma_separable_cat: finite differences, and values and gradients against the chain; shared: qkv also feeds
 * another op (its gradient added to). */
static void check_separable_cat(vt_test *T, int B, int s, int H, int W, int shared) {
    gc_case f = {.name = shared ? "gma_separable_cat_shared" : "gma_separable_cat", .nx = 5, .ndim = {3, 4, 4, 4, 4},
                 .build = shared ? b_sepcat_shared : b_sepcat, .ia = {H, W}};
    const int qs[3] = {15 * s, B, H * W}, ps[4] = {3 * s, s, 1, 1};
    memcpy(f.shape[0], qs, sizeof qs);
    for (int j = 1; j <= 3; j++) {
        const int ds[4] = {s, 1, 2 * j + 1, 2 * j + 1};
        memcpy(f.shape[j], ds, sizeof ds);
    }
    memcpy(f.shape[4], ps, sizeof ps);
    gc_run_vs_plain(T, &f, shared ? b_sepcat_chain_shared : b_sepcat_chain,
                    "segment 0's copy, three separable convs and a concat", 1e-5);
}

void test_gma(vt_test *T) {
    check_separable(T, 2, 2, 5, 7, 1, 3, 0);  /* the Q, K, V images of segment 1, a non-square grid */
    check_separable(T, 1, 3, 6, 18, 3, 7, 0); /* a plane wider than one 16-wide block, 7x7 */
    check_separable(T, 3, 2, 4, 3, 2, 5, 0);  /* a 5x5 kernel over a smaller plane */
    check_separable(T, 2, 2, 5, 4, 4, 3, 0);  /* the non-attention branch: [Q_4 | K_4 | V_4] per image */
    check_separable(T, 1, 2, 11, 5, 3, 7, 1); /* taller than one 8-row tile; qkv's gradient added to */
    check_separable(T, 2, 1, 9, 6, 4, 3, 1);  /* the same for the non-attention branch */
    /* under 4 (image, conv) items the work splits by 8-channel and 64-column chunks (the cases above with B·3 or B
     * images below 4 take it too): 9 channels over 77 and 72 pixels, and 4 images of the non-attention branch that
     * do not split */
    check_separable(T, 1, 3, 11, 7, 4, 3, 0);
    check_separable(T, 1, 9, 9, 8, 2, 5, 1);
    check_separable(T, 4, 2, 5, 4, 4, 3, 0);
    check_separable_cat(T, 2, 2, 5, 7, 0);  /* segments 0-3 side by side, a non-square grid */
    check_separable_cat(T, 1, 3, 9, 18, 1); /* wider than a 16-wide block, taller than an 8-row tile; qkv shared */
    check_merge(T, 2, 5, 7, 3, 3, (const int[]){2, 5, 5}, 357);    /* A = 12: groups across the first tile's edge */
    check_merge(T, 1, 8, 17, 8, 3, (const int[]){16, 24, 24}, 357); /* whole 8×8 tiles, rows wider than 16 */
    check_merge(T, 3, 1, 5, 1, 1, (const int[]){9}, 700);           /* fewer tokens than a tile, 7×7 on one row */
    check_merge(T, 2, 11, 4, 8, 2, (const int[]){4, 4}, 530);       /* taller than 8 rows; u a whole tile */
    check_merge(T, 5, 6, 6, 2, 2, (const int[]){3, 3}, 370);        /* more images than threads, odd tiles */
    check_merge(T, 4, 5, 7, 3, 3, (const int[]){2, 5, 5}, 357);    /* 8 units: chunks on 2 threads, round robin on 3 */
    check_merge(T, 3, 4, 6, 8, 3, (const int[]){8, 12, 12}, 357);  /* 15 units in chunks: an image split at a chunk */
    check_merge_grads(T);
    /* shape errors of the merge op (groups not adding up to f's channels, u of another token count, q unlike f, a
     * grid that is not f's, v of another channel count, an even kernel, a bias of another width) and of the fused
     * aggregators on a token-major qkv (B, N, 3C) */
    static const struct {
        int fs[3], qs[3], us[3], vs[3], hw[2], c[2], k[2], nb;
        const char *msg;
        int nv; /* groups passed (0: the 2 given); more than the op takes, or none */
    } bad[] = {{{2, 12, 9}, {2, 12, 9}, {2, 3, 9}, {2, 12, 9}, {3, 3}, {6, 5}, {3, 5}, 5, "have 11 channels", 0},
               {{2, 12, 9}, {2, 12, 9}, {2, 3, 8}, {2, 12, 9}, {3, 3}, {6, 6}, {3, 5}, 6, "must be (B, T, N)", 0},
               {{2, 12, 9}, {2, 12, 8}, {2, 3, 9}, {2, 12, 9}, {3, 3}, {6, 6}, {3, 5}, 6, "one (B, A, N) shape", 0},
               {{2, 12, 9}, {2, 12, 9}, {2, 3, 9}, {2, 12, 9}, {9, 2}, {6, 6}, {3, 5}, 6, "N = H·W = 9·2", 0},
               {{2, 12, 9}, {2, 12, 9}, {2, 3, 9}, {2, 10, 9}, {3, 3}, {6, 6}, {3, 5}, 6, "v (2, 10, 9) must be", 0},
               {{2, 12, 9}, {2, 12, 9}, {2, 3, 9}, {2, 12, 9}, {3, 3}, {6, 6}, {3, 4}, 6, "k odd", 0},
               {{2, 12, 9}, {2, 12, 9}, {2, 3, 9}, {2, 12, 9}, {3, 3}, {6, 6}, {3, 5}, 5, "bias (5)", 0},
               {{2, 12, 9}, {2, 12, 9}, {2, 3, 9}, {2, 12, 9}, {3, 3}, {6, 6}, {3, 5}, 6, "11 CRPE groups", 11},
               {{2, 12, 9}, {2, 12, 9}, {2, 3, 9}, {2, 12, 9}, {3, 3}, {6, 6}, {3, 5}, 6, "-1 CRPE groups", -1}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        vt_err e = {0};
        vt_params *P = vt_params_new(&e);
        vt_graph *g = vt_graph_new(P, 0, &e);
        vt_tensor *w[2], *b[2];
        for (int j = 0; j < 2; j++) {
            const int k = bad[i].k[j], ws[4] = {bad[i].c[j], 1, k, k}, bs = j ? bad[i].nb : bad[i].c[j];
            w[j] = vt_input(g, j ? "w1" : "w0", 4, ws);
            b[j] = vt_input(g, j ? "b1" : "b0", 1, &bs);
        }
        const vt_tensor *y =
            vt_gma_merge(g, vt_input(g, "f", 3, bad[i].fs), vt_input(g, "q", 3, bad[i].qs),
                         vt_input(g, "v", 3, bad[i].vs), bad[i].hw[0], bad[i].hw[1], w, b, bad[i].nv ? bad[i].nv : 2,
                         vt_input(g, "u", 3, bad[i].us));
        T_CHECK(T, !y && strstr(g->err.msg, "gma_merge") && strstr(g->err.msg, bad[i].msg), "bad merge %zu: %s", i,
                g->err.msg);
        vt_graph_free(g);
        vt_params_free(P);
    }
    {
        vt_err e = {0};
        vt_params *P = vt_params_new(&e);
        vt_graph *g = vt_graph_new(P, 0, &e);
        const int qs[3] = {2, 12, 60}, d3[4] = {4, 1, 3, 3}, d5[4] = {4, 1, 5, 5}, d7[4] = {4, 1, 7, 7};
        const int pw[3] = {3, 4, 4}, bn[3] = {4, 2, 4};
        const vt_tensor *y = vt_gma_aggregate_eval(g, vt_input(g, "qkv", 3, qs), 3, 4, vt_input(g, "d3", 4, d3),
                                                   vt_input(g, "d5", 4, d5), vt_input(g, "d7", 4, d7),
                                                   vt_input(g, "pw", 3, pw), vt_input(g, "bn", 3, bn));
        T_CHECK(T, !y && strstr(g->err.msg, "(3C, B, H·W"), "token-major qkv must fail: %s", g->err.msg);
        vt_graph_free(g);
        vt_params_free(P);
    }
    /* the separable op: an even kernel, a weight for another segment's channel count, segment 0 */
    static const struct {
        int seg;
        const char *msg;
    } sb[] = {{1, "must be (4, 1, k, k)"}, {4, "must be (4, 12, 1, 1)"}, {0, "segments 1 to 4"}};
    for (size_t i = 0; i < sizeof sb / sizeof sb[0]; i++) {
        vt_err e = {0};
        vt_params *P = vt_params_new(&e);
        vt_graph *g = vt_graph_new(P, 1, &e);
        const int sq[3] = {60, 2, 12}, d12[4] = {12, 1, 3, 3}, d4e[4] = {4, 1, 2, 2}, p4[4] = {4, 4, 1, 1};
        const vt_tensor *y = vt_gma_separable(g, vt_input(g, "q", 3, sq), sb[i].seg, 3, 4,
                                              vt_input(g, "d", 4, i ? d12 : d4e), vt_input(g, "p", 4, p4));
        T_CHECK(T, !y && strstr(g->err.msg, "gma_separable") && strstr(g->err.msg, sb[i].msg), "bad separable %zu: %s",
                i, g->err.msg);
        vt_graph_free(g);
        vt_params_free(P);
    }
    { /* the cat op: segment 2's depthwise weight of segment 4's channel count; a pointwise weight of other inputs */
        for (int i = 0; i < 2; i++) {
            vt_err e = {0};
            vt_params *P = vt_params_new(&e);
            vt_graph *g = vt_graph_new(P, 1, &e);
            const int sq[3] = {60, 2, 12}, d3[4] = {4, 1, 3, 3}, d5[4] = {i ? 4 : 12, 1, 5, 5}, d7[4] = {4, 1, 7, 7},
                      p4[4] = {4, 4, 1, 1}, p8[4] = {4, 8, 1, 1};
            vt_tensor *dw[3] = {vt_input(g, "d3", 4, d3), vt_input(g, "d5", 4, d5), vt_input(g, "d7", 4, d7)};
            vt_tensor *pw[3] = {vt_input(g, "p1", 4, p4), vt_input(g, "p2", 4, p4), vt_input(g, "p3", 4, i ? p8 : p4)};
            const vt_tensor *y = vt_gma_separable_cat(g, vt_input(g, "q", 3, sq), 3, 4, dw, pw);
            T_CHECK(T, !y && strstr(g->err.msg, i ? "pointwise weight (4, 8, 1, 1)" : "(4, 1, k, k)") &&
                           strstr(g->err.msg, i ? "segment 3" : "segment 2"),
                    "bad separable cat %d: %s", i, g->err.msg);
            vt_graph_free(g);
            vt_params_free(P);
        }
    }
    check_block_grad(T, "gma_attn 2x(3x4) C20", 1, 2, 3, 4, 20);
    check_block_grad(T, "gma_block 1x(4x3) C20", 0, 1, 4, 3, 20);
    check_eval_fused(T, 2, 3, 5, 40);  /* 15 tokens: 8×8 transposes and scalar edges; s = 8 */
    check_eval_fused(T, 1, 8, 12, 80); /* s = 16, a 7x7 kernel wider than the grid's height margin */
    check_eval_fused(T, 3, 7, 7, 20);  /* s = 4: no whole 8-channel block */
    /* shape errors: width not a multiple of 10, N != H·W, host with a class token */
    vt_err e = {0};
    vt_params *P = vt_params_new(&e);
    vt_graph *g = vt_graph_new(P, 0, &e);
    int s1[3] = {2, 12, 12}, s2[3] = {2, 12, 20}, s3[3] = {1, 17, 20};
    T_CHECK(T, !vt_block_gma_attn(g, "a", vt_input(g, "x1", 3, s1), 3, 4) && strstr(g->err.msg, "multiple of 10"),
            "C = 12 must fail: %s", g->err.msg);
    vt_graph_free(g);
    g = vt_graph_new(P, 0, &e);
    T_CHECK(T, !vt_block_gma(g, "b", vt_input(g, "x2", 3, s2), 3, 3, 40, 0.0f) && strstr(g->err.msg, "H·W"),
            "N = 12 on a 3x3 grid must fail: %s", g->err.msg);
    vt_graph_free(g);
    g = vt_graph_new(P, 0, &e);
    const vt_attn_ctx ac = {.heads = 8, .lead = 1, .grid_h = 4, .grid_w = 4};
    T_CHECK(T, !vt_attn_build(g, "gma", "c", vt_input(g, "x3", 3, s3), &ac) && strstr(g->err.msg, "class token"),
            "17 tokens (class token) must fail: %s", g->err.msg);
    vt_graph_free(g);
    vt_params_free(P);
    /* stage maps of groupmixformer_test at 64×96 (non-square) and 61×93 (the official size rule: ceil(ceil(S/2)/2) a
     * multiple of 8, the stride-2 convs rounding up): (B, C_i, 64/2^(i+2), 96/2^(i+2)) for both */
    const vt_model_cfg *mc = vt_model_find("groupmixformer_test");
    T_CHECK(T, mc != NULL, "groupmixformer_test registered");
    if (mc) {
        P = vt_params_new(&e);
        static const int sizes[2][2] = {{64, 96}, {61, 93}};
        for (int k = 0; k < 2; k++) {
            g = vt_graph_new(P, 0, &e);
            int xs[4] = {2, 3, sizes[k][0], sizes[k][1]};
            vt_tensor *maps[4];
            int rc = mc->family->features(g, mc, vt_input(g, "input", 4, xs), maps) == 4 ? 0 : -1;
            T_CHECK(T, rc == 0, "features build %dx%d: %s", xs[2], xs[3], g->err.msg);
            for (int i = 0; rc == 0 && i < 4; i++)
                T_CHECK(T, maps[i]->ndim == 4 && maps[i]->shape[0] == 2 &&
                               maps[i]->shape[1] == mc->arch.stages[i].dim && maps[i]->shape[2] == 64 >> (i + 2) &&
                               maps[i]->shape[3] == 96 >> (i + 2),
                        "%dx%d: stage %d map shape", xs[2], xs[3], i);
            T_CHECK(T, rc == 0 && vt_graph_finalize(g, &e) == 0, "features finalize: %s", e.msg);
            vt_graph_free(g);
        }
        static const int bad_sizes[3] = {80, 60, 57}; /* stage-1 grids 20, 15, 15: official asserts fail */
        for (int k = 0; k < 3; k++) {
            g = vt_graph_new(P, 0, &e);
            int bad[4] = {1, 3, 64, bad_sizes[k]};
            vt_tensor *maps[4];
            T_CHECK(T, mc->family->features(g, mc, vt_input(g, "input", 4, bad), maps) < 0 &&
                           strstr(g->err.msg, "positive multiple of 8"), "%d px must fail: %s", bad[3], g->err.msg);
            vt_graph_free(g);
        }
        vt_params_free(P);
    }
}
