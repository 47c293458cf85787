/* vt_attention_ex (src/ops/attention.c), the general fused attention: equality with the plain op chain
 * (vt_slice / vt_split_heads / vt_matmul / vt_add / vt_softmax / vt_merge_heads; forward and every gradient, train and
 * eval graphs) for separate q and kv with M ≠ N, CSwin-style channel offsets, bias shared and per batch entry, masks
 * with nW > 1 (0 / −100), MSF with bias and mask, huge negative logits (−1e30, −3e38); finite-difference gradients
 * on small and edge shapes (N = 1, M = 1, odd sizes; masks from vt_window_shift_mask); the builder's errors.
 * vt_stripe_attention (CSwin's two branches with their LePE as one op): finite-difference gradients, and values and
 * gradients against the chain src/blocks/cswin.c builds without it (stripe partition, two fused attentions, the LePE
 * convolutions, the reverse into the grid), for stripes 1 to S wide (S = 1 too), the small-key tiles and more keys
 * than they take, units of whole stripes, of some of a stripe's heads and of one, odd H/2, qkv's gradient written and
 * added to, on 2, 3 and 4 threads; its errors. */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "gradcheck.h"
#include "vitc/ops.h"

typedef struct {
    const char *name;
    int B, N, M, Lq, Lkv;        /* Lkv = 0: self-attention (kv = NULL, keys and values in q; M = N) */
    int H, dim, q_off, k_off, v_off, p_off;
    int msf, bias;               /* bias: 0 none, 1 shared (H, N, M), 2 per batch entry (B, H, N, M) */
    int nW;                      /* 0: no mask; else a (nW, N, M) mask */
    float scale;
    int huge;                    /* bias with −1e30 entries (a whole row for head 0) */
    int sm[6];                   /* FD cases: the mask is vt_window_shift_mask(Hp, Wp, wh, ww, sh, sw) (sm[0] > 0) */
} acase;

static int keys(const acase *c) { return c->Lkv ? c->M : c->N; }

/* 0 or −100 in a scrambled pattern, never masking the key j = i mod M (as Swin: a token always sees its region). */
static void fill_mask(float *d, const acase *c) {
    const int N = c->N, M = keys(c);
    for (int w = 0; w < c->nW; w++)
        for (int i = 0; i < N; i++)
            for (int j = 0; j < M; j++)
                d[((size_t)w * N + i) * M + j] = (j != i % M && (i * 3 + j * 5 + w * 7) % 3 == 0) ? -100.0f : 0.0f;
}

static void fill_bias(float *d, int64_t n, const acase *c) {
    for (int64_t i = 0; i < n; i++) d[i] = 0.5f * (float)((i * 7919) % 23) / 23.0f - 0.25f;
    if (!c->huge) return;
    const int M = keys(c);
    for (int j = 0; j < M; j++) d[j] = -1e30f; /* head 0, query 0: every key */
    for (int64_t i = 3; i < n; i += 5) d[i] = (i % 2) ? -1e30f : -3e38f;
}

/* Operands: x0 = q, then kv (if separate), bias (if any), mask (if any and not a shift-mask op; not differentiated). */
static int operands(const acase *c, int *ndim, int shape[][VT_MAXDIM]) {
    int k = 0;
    const int M = keys(c);
    ndim[k] = 3;
    shape[k][0] = c->B, shape[k][1] = c->N, shape[k][2] = c->Lq, k++;
    if (c->Lkv) ndim[k] = 3, shape[k][0] = c->B, shape[k][1] = c->M, shape[k][2] = c->Lkv, k++;
    if (c->bias == 1) ndim[k] = 3, shape[k][0] = c->H, shape[k][1] = c->N, shape[k][2] = M, k++;
    if (c->bias == 2) ndim[k] = 4, shape[k][0] = c->B, shape[k][1] = c->H, shape[k][2] = c->N, shape[k][3] = M, k++;
    if (c->nW && !c->sm[0]) ndim[k] = 3, shape[k][0] = c->nW, shape[k][1] = c->N, shape[k][2] = M, k++;
    return k;
}

static void split_operands(const acase *c, vt_tensor **x, vt_tensor **q, vt_tensor **kv, vt_tensor **bias,
                           vt_tensor **mask) {
    int k = 0;
    *q = x[k++];
    *kv = c->Lkv ? x[k++] : NULL;
    *bias = c->bias ? x[k++] : NULL;
    *mask = c->nW && !c->sm[0] ? x[k++] : NULL;
}

static vt_tensor *fused(vt_graph *g, const acase *c, vt_tensor *q, vt_tensor *kv, vt_tensor *bias, vt_tensor *mask) {
    const vt_attn_args a = {.heads = c->H, .dim = c->dim, .q_off = c->q_off, .k_off = c->k_off, .v_off = c->v_off,
                            .p_off = c->p_off, .scale = c->scale, .msf = c->msf, .bias = bias, .mask = mask};
    return vt_attention_ex(g, q, kv, &a);
}

/* The unfused chain: channel ranges by vt_slice, heads split, q·kᵀ·scale (MSF: − 0.5·scale·‖k‖² per key), + bias,
 * + mask (batch viewed as (B/nW, nW)), softmax, ·v (MSF: − p), heads merged. */
static vt_tensor *plain(vt_graph *g, const acase *c, vt_tensor *q, vt_tensor *kv, vt_tensor *bias, vt_tensor *mask) {
    vt_tensor *kt = kv ? kv : q;
    const int H = c->H, dh = c->dim / H, B = c->B, N = c->N, M = keys(c);
    vt_tensor *qh = vt_split_heads(g, vt_slice(g, q, 2, c->q_off, c->dim), 0, H, dh);
    vt_tensor *kh = vt_split_heads(g, vt_slice(g, kt, 2, c->k_off, c->dim), 0, H, dh);
    vt_tensor *vh = vt_split_heads(g, vt_slice(g, kt, 2, c->v_off, c->dim), 0, H, dh);
    vt_tensor *logits = vt_matmul(g, qh, kh, 0, 1, c->scale);
    if (c->msf) {
        const int ks[4] = {B, H, 1, M};
        vt_tensor *kn = vt_scale(g, vt_mean(g, vt_mul(g, kh, kh), 3), 0.5f * c->scale * (float)dh); /* (B, H, M) */
        logits = vt_sub(g, logits, vt_reshape(g, kn, 4, ks));
    }
    if (bias) logits = vt_add(g, logits, bias);
    if (mask) {
        const int s5[5] = {B / c->nW, c->nW, H, N, M}, m4[4] = {c->nW, 1, N, M}, s4[4] = {B, H, N, M};
        logits = vt_reshape(g, vt_add(g, vt_reshape(g, logits, 5, s5), vt_reshape(g, mask, 4, m4)), 4, s4);
    }
    vt_tensor *o = vt_matmul(g, vt_softmax(g, logits, -1), vh, 0, 0, 1.0f);
    if (c->msf) o = vt_sub(g, o, vt_split_heads(g, vt_slice(g, q, 2, c->p_off, c->dim), 0, H, dh));
    return vt_merge_heads(g, o);
}

/* Runs the fused or the plain form; out gets the output, grads the concatenated operand gradients (train). */
static int run(const acase *c, int use_fused, int train, float *out, float *grads, vt_err *err) {
    vt_err e = {0};
    vt_params *P = vt_params_new(&e);
    vt_graph *g = vt_graph_new(P, train, &e);
    int ndim[GC_MAXX], shape[GC_MAXX][VT_MAXDIM];
    const int nx = operands(c, ndim, shape);
    vt_tensor *x[GC_MAXX];
    for (int i = 0; i < nx; i++) {
        char nm[16];
        snprintf(nm, sizeof nm, "x%d", i);
        x[i] = vt_param(g, nm, ndim[i], shape[i], (vt_init){VT_INIT_NORMAL, 1.0f});
    }
    vt_tensor *q, *kv, *bias, *mask;
    split_operands(c, x, &q, &kv, &bias, &mask);
    vt_tensor *y = use_fused ? fused(g, c, q, kv, bias, mask) : plain(g, c, q, kv, bias, mask);
    const int rs[3] = {c->B, c->N, c->dim};
    vt_tensor *r = vt_input(g, "r", 3, rs);
    vt_graph_set_loss(g, vt_sum(g, vt_mul(g, y, r)));
    vt_graph_output(g, y);
    int rc = vt_graph_finalize(g, &e);
    if (rc == 0) {
        vt_params_init(P, 7);
        if (bias) fill_bias(bias->data, bias->numel, c);
        if (mask) fill_mask(mask->data, c);
        for (int64_t i = 0; i < r->numel; i++) r->data[i] = (float)((i * 7919) % 13) / 13.0f - 0.5f;
        vt_graph_forward(g);
        memcpy(out, y->data, sizeof(float) * (size_t)y->numel);
        if (train) {
            vt_params_zero_grad(P);
            vt_graph_backward(g);
            size_t off = 0;
            for (int i = 0; i < nx; i++) {
                if (x[i] == mask) continue;
                memcpy(grads + off, x[i]->grad, sizeof(float) * (size_t)x[i]->numel);
                off += (size_t)x[i]->numel;
            }
        }
    } else {
        *err = e;
    }
    vt_graph_free(g);
    vt_params_free(P);
    return rc;
}

/* max |a − b| / max(1, max |b|) */
static double rel_err(const float *a, const float *b, size_t n) {
    double e = 0, m = 1;
    for (size_t i = 0; i < n; i++) {
        e = t_worse(e, fabs((double)a[i] - b[i]));
        m = fmax(m, fabs(b[i]));
        if (!isfinite(a[i])) return INFINITY;
    }
    return e / m;
}

static void check_equal(vt_test *T, const acase *c) {
    int ndim[GC_MAXX], shape[GC_MAXX][VT_MAXDIM];
    const int nx = operands(c, ndim, shape);
    size_t ng = 0;
    for (int i = 0; i < nx - (c->nW ? 1 : 0); i++) ng += (size_t)vt_shape_numel(ndim[i], shape[i]);
    const size_t no = (size_t)c->B * c->N * c->dim;
    float *o1 = malloc(sizeof(float) * no), *o2 = malloc(sizeof(float) * no);
    float *g1 = malloc(sizeof(float) * ng), *g2 = malloc(sizeof(float) * ng);
    for (int train = 0; train < 2; train++) {
        vt_err e1 = {0}, e2 = {0};
        const int r1 = run(c, 1, train, o1, g1, &e1), r2 = run(c, 0, train, o2, g2, &e2);
        T_CHECK(T, r1 == 0 && r2 == 0, "%s: build failed: %s%s", c->name, e1.msg, e2.msg);
        if (r1 || r2) break;
        const double eo = rel_err(o1, o2, no), eg = train ? rel_err(g1, g2, ng) : 0.0;
        T_CHECK(T, eo < 2e-5 && eg < 2e-5, "%s (train=%d): fused vs plain output err %g, gradient err %g", c->name,
                train, eo, eg);
    }
    free(o1), free(o2), free(g1), free(g2);
}

/* A finite-difference case: gc_run hands build() the gc_case, the first member. */
typedef struct {
    gc_case gc;
    acase a;
} fd_case;

static vt_tensor *b_gc(vt_graph *g, vt_tensor **x, const gc_case *gc) {
    const acase *c = &((const fd_case *)(const void *)gc)->a;
    vt_tensor *q, *kv, *bias, *mask;
    split_operands(c, x, &q, &kv, &bias, &mask);
    if (c->sm[0]) mask = vt_window_shift_mask(g, c->sm[0], c->sm[1], c->sm[2], c->sm[3], c->sm[4], c->sm[5]);
    return fused(g, c, q, kv, bias, mask);
}

/* Values in [−1, 1) spaced by 1/14.5 (distinct logits). */
static void gc_fill(float *d, int64_t n, int which, vt_rng *r) {
    (void)r;
    for (int64_t i = 0; i < n; i++) d[i] = (float)((i * 7919 + which * 131) % 29) / 14.5f - 1.0f;
}

static void check_fd(vt_test *T, const acase *tab, int n) {
    for (int i = 0; i < n; i++) {
        fd_case f = {.gc = {.name = tab[i].name, .build = b_gc, .fill = gc_fill}, .a = tab[i]};
        f.gc.nx = operands(&f.a, f.gc.ndim, f.gc.shape);
        if (f.a.nW && !f.a.sm[0]) f.gc.nograd[f.gc.nx - 1] = 1;
        gc_run(T, &f.gc);
    }
}

/* The builder's errors name the op and the shapes. */
static void check_errors(vt_test *T) {
    struct {
        const char *want;
        int qs[3], kvs[3], bs[4], bnd, ms[3], mnd, q_off, k_off, v_off, heads, dim;
    } E[] = {
        {"bias", {2, 4, 12}, {0}, {3, 4, 4}, 3, {0}, 0, 0, 4, 8, 2, 4},       /* bias heads 3 ≠ 2 */
        {"nW dividing", {3, 4, 12}, {0}, {0}, 0, {2, 4, 4}, 3, 0, 4, 8, 2, 4}, /* nW 2 does not divide 3 */
        {"overlap", {2, 4, 12}, {0}, {0}, 0, {0}, 0, 0, 2, 8, 2, 4},           /* k at 2 overlaps q [0, 4) */
        {"batch", {2, 4, 4}, {3, 5, 8}, {0}, 0, {0}, 0, 0, 0, 4, 2, 4},       /* kv batch 3 */
        {"inside", {2, 4, 12}, {0}, {0}, 0, {0}, 0, 0, 4, 10, 2, 4},          /* v [10, 14) outside 12 */
        {"divisible", {2, 4, 12}, {0}, {0}, 0, {0}, 0, 0, 4, 8, 3, 4},        /* dim 4, 3 heads */
    };
    for (size_t i = 0; i < sizeof E / sizeof E[0]; i++) {
        vt_err e = {0};
        vt_params *P = vt_params_new(&e);
        vt_graph *g = vt_graph_new(P, 1, &e);
        vt_tensor *q = vt_input(g, "q", 3, E[i].qs), *kv = E[i].kvs[0] ? vt_input(g, "kv", 3, E[i].kvs) : NULL;
        vt_tensor *b = E[i].bnd ? vt_input(g, "bias", E[i].bnd, E[i].bs) : NULL;
        vt_tensor *m = E[i].mnd ? vt_input(g, "mask", E[i].mnd, E[i].ms) : NULL;
        const vt_attn_args a = {.heads = E[i].heads, .dim = E[i].dim, .q_off = E[i].q_off, .k_off = E[i].k_off,
                                .v_off = E[i].v_off, .scale = 1.0f, .bias = b, .mask = m};
        vt_tensor *y = vt_attention_ex(g, q, kv, &a);
        T_CHECK(T, !y && strstr(g->err.msg, "attention") && strstr(g->err.msg, E[i].want) && strstr(g->err.msg, "("),
                "error case %zu: got '%s'", i, g->err.msg);
        vt_graph_free(g);
        vt_params_free(P);
    }
}

/* Operands qkv (B, S·S, 3C), the LePE weight (C, 1, 3, 3) and bias (C); ia = {S, s, heads, shared}: shared adds
 * qkv's q channels to the output, so qkv's gradient has a second term that the op must add to. */
static vt_tensor *stripe_shared(vt_graph *g, vt_tensor *y, vt_tensor *qkv, const gc_case *c) {
    return c->ia[3] ? vt_add(g, y, vt_slice(g, qkv, 2, 0, qkv->shape[2] / 3)) : y;
}

static vt_tensor *b_stripe(vt_graph *g, vt_tensor **x, const gc_case *c) {
    const int C = x[0]->shape[2] / 3, h = c->ia[2];
    return stripe_shared(g, vt_stripe_attention(g, x[0], c->ia[0], c->ia[1], h, 1.0f / sqrtf((float)(C / h)), x[1],
                                                x[2]),
                         x[0], c);
}

/* One branch of the chain: attention over the windows of t (nw, wh·ww, Lt), heads of hc channels at q_off, + C,
 * + 2C, plus the LePE (channels [q_off, q_off + hc) of w and b) of its values -> (nw, wh·ww, hc). */
static vt_tensor *stripe_branch(vt_graph *g, vt_tensor *t, vt_tensor **x, int C, int q_off, int l_off, int hc, int h,
                                int wh, int ww) {
    const vt_attn_args a = {.heads = h / 2, .dim = hc, .q_off = q_off, .k_off = q_off + C, .v_off = q_off + 2 * C,
                            .scale = 1.0f / sqrtf((float)(2 * hc / h))};
    vt_tensor *o = vt_attention_ex(g, t, NULL, &a);
    const int m4[4] = {t->shape[0], wh, ww, t->shape[2]}, m3[3] = {t->shape[0], wh * ww, hc};
    vt_tensor *w = vt_slice(g, x[1], 0, l_off, hc), *b = vt_slice(g, x[2], 0, l_off, hc);
    return vt_reshape(g, vt_dwconv_nhwc_ex(g, vt_reshape(g, t, 4, m4), q_off + 2 * C, w, b, 1, o), 3, m3);
}

static vt_tensor *b_stripe_chain(vt_graph *g, vt_tensor **x, const gc_case *c) {
    const int S = c->ia[0], s = c->ia[1], h = c->ia[2], B = x[0]->shape[0], C = x[0]->shape[2] / 3, hc = C / 2;
    const int m4[4] = {B, S, S, 3 * C}, hs[3] = {B * (S / s), s * S, 3 * C};
    vt_tensor *vw = vt_window_partition_sel(g, vt_reshape(g, x[0], 4, m4), S, s, 0, 0, 3, hc);
    vt_tensor *o0 = stripe_branch(g, vw, x, hc, 0, 0, hc, h, S, s);
    vt_tensor *o1 = stripe_branch(g, vt_reshape(g, x[0], 3, hs), x, C, hc, hc, hc, h, s, S);
    const int t3[3] = {B, S * S, C};
    return stripe_shared(g, vt_reshape(g, vt_window_reverse_cat(g, o0, o1, S, S, S, s, 0, 0), 3, t3), x[0], c);
}

static void check_stripe(vt_test *T, const char *name, int B, int S, int s, int C, int h, int shared) {
    gc_case f = {.name = name, .nx = 3, .ndim = {3, 4, 1}, .build = b_stripe, .fill = gc_fill,
                 .ia = {S, s, h, shared}};
    const int qs[3] = {B, S * S, 3 * C}, ws[4] = {C, 1, 3, 3};
    memcpy(f.shape[0], qs, sizeof qs);
    memcpy(f.shape[1], ws, sizeof ws);
    f.shape[2][0] = C;
    gc_run_vs_plain(T, &f, b_stripe_chain, "the stripe partition, attention, LePE and reverse chain", 1e-5);
}

/* vt_stripe_attention's errors name the op and the shapes. */
static void check_stripe_errors(vt_test *T) {
    struct {
        const char *want;
        int qs[3], S, s, heads, wc, bc;
    } E[] = {
        {"dividing", {1, 36, 24}, 6, 4, 2, 8, 8},   /* stripe 4 does not divide 6 */
        {"S·S", {1, 35, 24}, 6, 2, 2, 8, 8},        /* 35 tokens */
        {"even number", {1, 36, 24}, 6, 2, 1, 8, 8}, /* one head */
        {"even number", {1, 36, 24}, 6, 2, 6, 8, 8}, /* 6 heads do not divide 8 channels */
        {"LePE", {1, 36, 24}, 6, 2, 2, 4, 8},       /* weight of 4 channels */
        {"LePE", {1, 36, 24}, 6, 2, 2, 8, 6},       /* bias of 6 */
    };
    for (size_t i = 0; i < sizeof E / sizeof E[0]; i++) {
        vt_err e = {0};
        vt_params *P = vt_params_new(&e);
        vt_graph *g = vt_graph_new(P, 1, &e);
        const int ws[4] = {E[i].wc, 1, 3, 3};
        vt_tensor *y = vt_stripe_attention(g, vt_input(g, "qkv", 3, E[i].qs), E[i].S, E[i].s, E[i].heads, 1.0f,
                                           vt_input(g, "w", 4, ws), vt_input(g, "b", 1, &E[i].bc));
        T_CHECK(T, !y && strstr(g->err.msg, "stripe_attention") && strstr(g->err.msg, E[i].want) &&
                       strstr(g->err.msg, "(1, "),
                "stripe error case %zu: got '%s'", i, g->err.msg);
        vt_graph_free(g);
        vt_params_free(P);
    }
}

void test_ops_attention_ex(vt_test *T) {
    /*  name                B   N   M  Lq  Lkv H dim q_off k_off v_off p_off msf bias nW scale huge (sm) */
    static const acase eq[] = {
        {"sep_kv_M<N", 2, 17, 9, 24, 48, 3, 24, 0, 0, 24, 0, 0, 0, 0, 0.35f, 0, {0}},  /* PVT spatial reduction */
        {"sep_kv_M>N", 3, 5, 11, 30, 20, 2, 10, 20, 10, 0, 0, 0, 0, 0, 0.5f, 0, {0}},  /* offsets in both, v before k */
        {"cswin_offsets", 2, 13, 13, 48, 0, 2, 8, 8, 24, 40, 0, 0, 0, 0, 0.5f, 0, {0}}, /* [C/2, C) of q, k, v */
        {"bias_shared", 6, 9, 9, 36, 0, 3, 12, 0, 12, 24, 0, 0, 1, 0, 0.3f, 0, {0}},
        {"bias_batched", 4, 7, 5, 16, 32, 2, 16, 0, 0, 16, 0, 0, 2, 0, 0.3f, 0, {0}},
        {"mask_nW3", 6, 16, 16, 48, 0, 4, 16, 0, 16, 32, 0, 0, 1, 3, 0.4f, 0, {0}},    /* Swin: windows = batch */
        {"mask_nW2_h1", 2, 9, 9, 6, 0, 1, 2, 0, 2, 4, 0, 0, 1, 2, 0.4f, 0, {0}},  /* one head */
        {"bias_serial", 1, 11, 7, 4, 8, 1, 4, 0, 0, 4, 0, 0, 1, 0, 0.6f, 0, {0}},      /* B·H = 1: rows split */
        {"msf_bias_mask", 4, 9, 9, 32, 0, 2, 8, 0, 8, 16, 24, 1, 1, 2, 0.5f, 0, {0}},
        {"msf_sep_kv", 2, 6, 4, 16, 16, 2, 8, 8, 0, 8, 0, 1, 2, 0, 0.5f, 0, {0}},      /* probe before the queries */
        {"shared_qk", 2, 7, 7, 16, 0, 2, 8, 0, 0, 8, 0, 0, 0, 0, 0.5f, 0, {0}},        /* q and k the same channels */
        {"huge_negative", 4, 6, 6, 12, 0, 2, 4, 0, 4, 8, 0, 0, 2, 2, 1.0f, 1, {0}},
        {"n1_m1", 3, 1, 1, 9, 0, 1, 3, 0, 3, 6, 0, 0, 1, 3, 1.0f, 0, {0}},
        /* the models' tile sizes: dh 32 and 64, 49 to 128 keys (Swin's windows, CSwin's stripes) */
        {"win49_bias_mask", 4, 49, 49, 192, 0, 2, 64, 0, 64, 128, 0, 0, 1, 2, 0.18f, 0, {0}}, /* Swin's 7×7 windows */
        {"sep_kv_98", 4, 7, 98, 64, 128, 2, 64, 0, 0, 64, 0, 0, 2, 0, 0.2f, 0, {0}}, /* CSwin-T stage 3 stripes */
        {"msf_dh64", 4, 10, 10, 512, 0, 2, 128, 0, 128, 256, 384, 1, 0, 0, 0.15f, 0, {0}},
        {"m128_n5", 4, 5, 128, 32, 64, 1, 32, 0, 32, 0, 0, 0, 1, 0, 0.2f, 0, {0}},
        {"dh32_huge", 4, 6, 6, 96, 0, 1, 32, 0, 32, 64, 0, 0, 2, 2, 1.0f, 1, {0}},
        /* the AVX-512 small-key tiles' key-vector counts (1 to 4 in 6-row tiles, 5 to 7 in 3-row tiles: at most 112
         * keys) and the first past them */
        {"tile_m20_msf", 2, 13, 20, 48, 32, 2, 16, 16, 0, 16, 32, 1, 1, 0, 0.4f, 0, {0}},
        {"tile_m33_mask", 2, 8, 33, 12, 24, 1, 12, 0, 12, 0, 0, 0, 2, 2, 0.3f, 0, {0}},
        {"tile_m64_bias_mask", 4, 64, 64, 48, 0, 2, 16, 0, 16, 32, 0, 0, 1, 2, 0.3f, 0, {0}},
        {"tile_m65", 2, 7, 65, 16, 32, 2, 16, 0, 0, 16, 0, 0, 2, 0, 0.3f, 0, {0}},
        {"tile_m80_msf_bias", 2, 11, 80, 48, 32, 2, 16, 16, 0, 16, 32, 1, 1, 0, 0.4f, 0, {0}},
        {"tile_m97_mask", 2, 10, 97, 12, 24, 1, 12, 0, 12, 0, 0, 0, 2, 2, 0.3f, 0, {0}},
        {"tile_m112_n4", 2, 4, 112, 16, 32, 2, 16, 0, 0, 16, 0, 0, 0, 0, 0.3f, 0, {0}},
        {"tile_m113", 2, 7, 113, 16, 32, 2, 16, 0, 0, 16, 0, 0, 2, 0, 0.3f, 0, {0}},
        {"msf_m150_bias", 2, 11, 150, 48, 32, 2, 16, 16, 0, 16, 32, 1, 1, 0, 0.4f, 0, {0}}, /* MSF past the tiles */
        {"msf_m196_self", 2, 196, 196, 64, 0, 2, 16, 0, 16, 32, 48, 1, 0, 0, 0.25f, 0, {0}}, /* SimpleViT's 196 keys */
        /* whole key vectors (32, 48 keys) and fewer query rows than one tile holds (3, 5) */
        {"tile_m32_n3", 2, 3, 32, 16, 32, 2, 16, 0, 0, 16, 0, 0, 1, 0, 0.3f, 0, {0}},
        {"tile_m48_n5_msf", 2, 5, 48, 32, 32, 2, 16, 0, 0, 16, 16, 1, 2, 0, 0.4f, 0, {0}},
        {"tile_m48_self_mask", 4, 48, 48, 24, 0, 2, 8, 0, 8, 16, 0, 0, 1, 2, 0.3f, 0, {0}},
    };
    for (size_t i = 0; i < sizeof eq / sizeof eq[0]; i++) check_equal(T, &eq[i]);
    /* B·H = 3 on 2 threads: the forward runs each pair's query rows in chunks (attn_p.nr), the bias's, the mask's
     * and the probe's rows offset with them */
    static const acase chunks[] = {
        {"chunks_bias_mask", 3, 16, 16, 48, 0, 1, 16, 0, 16, 32, 0, 0, 1, 3, 0.4f, 0, {0}},
        {"chunks_msf_bias_mask", 3, 9, 9, 32, 0, 1, 8, 0, 8, 16, 24, 1, 1, 3, 0.5f, 0, {0}},
        {"chunks_bias_batched_sep_kv", 1, 13, 7, 24, 48, 3, 24, 0, 0, 24, 0, 0, 2, 0, 0.35f, 0, {0}},
        {"chunks_kv_untiled", 1, 13, 7, 24, 56, 3, 24, 0, 4, 30, 0, 0, 0, 0, 0.35f, 0, {0}}, /* kv channels outside k, v */
        /* the small-key tiles in chunks: partial tiles at each chunk's end, the mask's and the probe's rows offset */
        {"chunks_tile_m40_mask", 3, 20, 40, 16, 32, 1, 16, 0, 0, 16, 0, 0, 1, 3, 0.3f, 0, {0}},
        {"chunks_tile_m24_msf", 3, 17, 24, 32, 32, 1, 16, 0, 0, 16, 16, 1, 2, 0, 0.4f, 0, {0}},
        {"chunks_tile_m100_mask", 3, 20, 100, 16, 32, 1, 16, 0, 0, 16, 0, 0, 1, 3, 0.3f, 0, {0}}, /* 3-row tiles */
    };
    /* fewer pairs than threads: the pairs in sequence, each on every thread (rows_par), at the models' row counts */
    static const acase few[] = {
        {"few_bh1_tile_m49_sep_kv", 1, 100, 49, 64, 128, 1, 64, 0, 0, 64, 0, 0, 0, 0, 0.125f, 0, {0}}, /* PVTv2 stage 1 */
        {"few_bh1_msf_bias_mask", 1, 70, 70, 32, 0, 1, 8, 0, 8, 16, 24, 1, 1, 1, 0.5f, 0, {0}},
        {"few_bh1_bias_batched", 1, 66, 130, 16, 32, 1, 16, 0, 0, 16, 0, 0, 2, 0, 0.3f, 0, {0}}, /* generic keys */
    };
    /* on 4 threads, 3 pairs (DeiT-Ti's heads at batch 1): small-key tiles and generic keys */
    static const acase few4[] = {
        {"few_bh3_t4_generic", 1, 130, 130, 144, 0, 3, 48, 0, 48, 96, 0, 0, 0, 0, 0.25f, 0, {0}},
        {"few_bh3_t4_tile_bias_mask", 1, 100, 100, 144, 0, 3, 48, 0, 48, 96, 0, 0, 1, 1, 0.25f, 0, {0}},
    };
    const int saved = omp_get_max_threads();
    omp_set_num_threads(2);
    for (size_t i = 0; i < sizeof chunks / sizeof chunks[0]; i++) check_equal(T, &chunks[i]);
    for (size_t i = 0; i < sizeof few / sizeof few[0]; i++) check_equal(T, &few[i]);
    omp_set_num_threads(4);
    for (size_t i = 0; i < sizeof few4 / sizeof few4[0]; i++) check_equal(T, &few4[i]);
    omp_set_num_threads(saved);
    static const acase fd[] = {
        {"fd_sep_kv", 2, 5, 3, 6, 12, 2, 6, 0, 0, 6, 0, 0, 0, 0, 0.5f, 0, {0}},
        {"fd_offsets", 1, 4, 4, 12, 0, 2, 2, 2, 6, 10, 0, 0, 0, 0, 0.7f, 0, {0}},
        {"fd_bias_shared_mask", 4, 4, 4, 12, 0, 2, 4, 0, 4, 8, 0, 0, 1, 2, 0.5f, 0, {4, 2, 2, 2, 1, 1}},
        {"fd_bias_batched", 2, 3, 5, 4, 8, 2, 4, 0, 4, 0, 0, 0, 2, 0, 0.5f, 0, {0}},
        {"fd_msf_bias_mask", 2, 4, 4, 16, 0, 1, 4, 0, 4, 8, 12, 1, 1, 2, 0.5f, 0, {4, 2, 2, 2, 1, 1}},
        {"fd_msf_sep", 2, 3, 2, 8, 8, 2, 4, 0, 0, 4, 4, 1, 2, 0, 0.5f, 0, {0}},
        {"fd_n1", 1, 1, 1, 6, 0, 1, 2, 0, 2, 4, 0, 0, 1, 1, 1.0f, 0, {1, 1, 1, 1, 0, 0}},
        {"fd_mask_operand", 2, 3, 3, 6, 0, 1, 2, 0, 2, 4, 0, 0, 0, 2, 0.8f, 0, {0}},  /* mask parameter, no grad */
        {"fd_n1_m3", 3, 1, 3, 2, 6, 1, 2, 0, 0, 2, 0, 0, 2, 0, 1.0f, 0, {0}},
        {"fd_dh32", 4, 3, 5, 64, 128, 2, 64, 0, 0, 64, 0, 0, 1, 0, 0.2f, 0, {0}}, /* the models' head width */
        {"fd_tile_m36", 2, 7, 36, 6, 8, 1, 4, 2, 4, 0, 0, 0, 2, 0, 0.6f, 0, {0}}, /* three key vectors */
        {"fd_tile_m70", 2, 4, 70, 6, 8, 1, 4, 2, 4, 0, 0, 0, 2, 0, 0.6f, 0, {0}}, /* five, in 3-row tiles */
        {"fd_msf_m120", 1, 2, 120, 8, 8, 1, 4, 0, 0, 4, 4, 1, 0, 0, 0.5f, 0, {0}}, /* MSF past the small-key tiles */
    };
    check_fd(T, fd, (int)(sizeof fd / sizeof fd[0]));
    check_errors(T);
    /* vt_stripe_attention: units of whole stripes (hpu = H/2) where there are at least 4 per thread, else of halved
     * head slices while H/2 stays even */
    omp_set_num_threads(2);
    check_stripe(T, "stripe_s1", 2, 4, 1, 8, 2, 0);          /* stripes one token wide (CSwin-T's stage 1) */
    check_stripe(T, "stripe_s2_shared", 3, 6, 2, 16, 4, 1);  /* two heads a unit; qkv's gradient added to */
    check_stripe(T, "stripe_s3_units1", 1, 6, 3, 24, 4, 0);  /* 4 stripes: units of one head */
    check_stripe(T, "stripe_s7_dh32", 2, 14, 7, 128, 4, 0); /* CSwin-T's stage-3 stripes, 98 keys, heads of 32 */
    check_stripe(T, "stripe_sS", 2, 5, 5, 8, 2, 0);          /* a stripe is the whole grid */
    check_stripe(T, "stripe_S1", 2, 1, 1, 8, 2, 1);          /* a one-token grid */
    check_stripe(T, "stripe_m128", 1, 16, 8, 8, 2, 1);       /* 128 keys: more than the small-key tiles take */
    check_stripe(T, "stripe_hpu2", 1, 4, 2, 16, 8, 1);       /* H/2 = 4 in units of 2 heads: two slices a stripe */
    check_stripe(T, "stripe_hpu2_dh16", 1, 4, 2, 128, 8, 0); /* the same with heads of 16 (LePE's 16-wide path) */
    check_stripe(T, "stripe_odd_half", 1, 4, 2, 24, 6, 1);   /* H/2 = 3: whole stripes, too few of them */
    check_stripe(T, "stripe_b1_s1", 1, 3, 1, 8, 2, 1);
    omp_set_num_threads(3);
    check_stripe(T, "stripe_t3", 1, 6, 3, 24, 4, 1);
    check_stripe(T, "stripe_t3_m128", 2, 16, 8, 8, 2, 0);
    omp_set_num_threads(4);
    check_stripe(T, "stripe_t4", 2, 6, 2, 16, 4, 1);
    check_stripe(T, "stripe_t4_hpu2", 1, 8, 2, 32, 8, 0);
    check_stripe(T, "stripe_t4_s7", 3, 14, 7, 64, 4, 1);
    omp_set_num_threads(saved);
    check_stripe_errors(T);
}
