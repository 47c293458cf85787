/* vt_hallucinated_attention (src/ops/hattn.c), hMHSA's fused attention: equality with the plain op chain
 * (split_heads / matmul / permute / slice / conv2d / concat / softmax / merge_heads; forward and every gradient,
 * train and eval graphs) for a packed qkv with a bypassing token, a separate reduced kv, each stage order and
 * subset, no biases, one query and one key, a 1x1 key grid, 8 computed heads (CHH as a GEMM), and maps split into
 * several tiles (whole batch entries per thread, and one entry's tiles in parallel); finite-difference gradients on
 * small shapes; the builder's errors. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gradcheck.h"
#include "vitc/ops.h"

typedef struct {
    const char *name;
    int B, N, M, Lq, Lkv;        /* Lkv = 0: keys and values in q (M = N) */
    int H, dim, q_off, k_off, v_off;
    int klead, kh, kw;
    int ihh, chh, bias, chh_first; /* stages present, their biases present, order */
    float scale;
} hcase;

/* Operands: x0 = q, then kv (if separate), IHH weight (and bias), CHH weight (and bias). */
static int operands(const hcase *c, int *ndim, int shape[][VT_MAXDIM]) {
    int k = 0;
    const int h2 = c->H / 2;
    ndim[k] = 3, shape[k][0] = c->B, shape[k][1] = c->N, shape[k][2] = c->Lq, k++;
    if (c->Lkv) ndim[k] = 3, shape[k][0] = c->B, shape[k][1] = c->M, shape[k][2] = c->Lkv, k++;
    if (c->ihh) {
        ndim[k] = 4, shape[k][0] = h2, shape[k][1] = 1, shape[k][2] = 3, shape[k][3] = 3, k++;
        if (c->bias) ndim[k] = 1, shape[k][0] = h2, k++;
    }
    if (c->chh) {
        ndim[k] = 4, shape[k][0] = h2, shape[k][1] = h2, shape[k][2] = 1, shape[k][3] = 1, k++;
        if (c->bias) ndim[k] = 1, shape[k][0] = h2, k++;
    }
    return k;
}

typedef struct {
    vt_tensor *q, *kv, *iw, *ib, *cw, *cb;
} ops_in;

static ops_in split_operands(const hcase *c, vt_tensor **x) {
    ops_in o = {0};
    int k = 0;
    o.q = x[k++];
    if (c->Lkv) o.kv = x[k++];
    if (c->ihh) {
        o.iw = x[k++];
        if (c->bias) o.ib = x[k++];
    }
    if (c->chh) {
        o.cw = x[k++];
        if (c->bias) o.cb = x[k++];
    }
    return o;
}

static vt_tensor *fused(vt_graph *g, const hcase *c, const ops_in *o) {
    const vt_hattn_args a = {.heads = c->H, .dim = c->dim, .q_off = c->q_off, .k_off = c->k_off, .v_off = c->v_off,
                             .klead = c->klead, .kh = c->kh, .kw = c->kw, .scale = c->scale, .ihh_w = o->iw,
                             .ihh_b = o->ib, .chh_w = o->cw, .chh_b = o->cb, .chh_first = c->chh_first};
    return vt_hallucinated_attention(g, o->q, o->kv, &a);
}

/* IHH on a (B, h2, N, M) as the unfused graph runs it: heads as channels and each query's key grid as an image. */
static vt_tensor *plain_ihh(vt_graph *g, const hcase *c, vt_tensor *t, vt_tensor *w, vt_tensor *b) {
    const int perm[4] = {0, 2, 1, 3}, B = c->B, N = c->N, h2 = c->H / 2, G = c->kh * c->kw;
    vt_tensor *p = vt_permute(g, t, perm); /* (B, N, h2, M) */
    const int s4[4] = {B * N, h2, c->kh, c->kw}, s4b[4] = {B, N, h2, G};
    vt_tensor *y = vt_reshape(g, vt_conv2d(g, vt_reshape(g, vt_slice(g, p, 3, c->klead, G), 4, s4), w, b, 1, 1, h2),
                              4, s4b);
    if (c->klead) {
        vt_tensor *parts[2] = {vt_slice(g, p, 3, 0, c->klead), y};
        y = vt_concat(g, parts, 2, 3);
    }
    return vt_permute(g, y, perm);
}

/* CHH: a 1x1 conv over the heads at every (query, key). */
static vt_tensor *plain_chh(vt_graph *g, vt_tensor *t, vt_tensor *w, vt_tensor *b) {
    const int s4[4] = {t->shape[0], t->shape[1], t->shape[2] * t->shape[3], 1};
    return vt_reshape(g, vt_conv2d(g, vt_reshape(g, t, 4, s4), w, b, 1, 0, 1), 4, t->shape);
}

static vt_tensor *plain(vt_graph *g, const hcase *c, const ops_in *o) {
    vt_tensor *kt = o->kv ? o->kv : o->q;
    const int h2 = c->H / 2, d = c->dim / c->H;
    vt_tensor *ar = vt_matmul(g, vt_split_heads(g, o->q, c->q_off, h2, d), vt_split_heads(g, kt, c->k_off, h2, d), 0,
                              1, c->scale);
    vt_tensor *ah = ar;
    if (c->chh_first && o->cw) ah = plain_chh(g, ah, o->cw, o->cb);
    if (o->iw) ah = plain_ihh(g, c, ah, o->iw, o->ib);
    if (!c->chh_first && o->cw) ah = plain_chh(g, ah, o->cw, o->cb);
    vt_tensor *maps[2] = {ar, ah};
    vt_tensor *attn = vt_softmax(g, vt_concat(g, maps, 2, 1), -1);
    return vt_merge_heads(g, vt_matmul(g, attn, vt_split_heads(g, kt, c->v_off, c->H, d), 0, 0, 1.0f));
}

/* Runs the fused or the plain form; out gets the output, grads the concatenated operand gradients (train). */
static int run(const hcase *c, int use_fused, int train, float *out, float *grads, vt_err *err) {
    vt_err e = {{0}};
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
    ops_in o = split_operands(c, x);
    o.q = vt_scale(g, o.q, 1.0f); /* activations, whose gradients the op may write rather than add to */
    if (o.kv) o.kv = vt_scale(g, o.kv, 1.0f);
    vt_tensor *y = use_fused ? fused(g, c, &o) : plain(g, c, &o);
    const int rs[3] = {c->B, c->N, c->dim};
    vt_tensor *r = vt_input(g, "r", 3, rs);
    vt_graph_set_loss(g, vt_sum(g, vt_mul(g, y, r)));
    vt_graph_output(g, y);
    int rc = vt_graph_finalize(g, &e);
    if (rc == 0) {
        vt_params_init(P, 7);
        for (int64_t i = 0; i < r->numel; i++) r->data[i] = (float)((i * 7919) % 13) / 13.0f - 0.5f;
        vt_graph_forward(g);
        memcpy(out, y->data, sizeof(float) * (size_t)y->numel);
        if (train) {
            vt_params_zero_grad(P);
            vt_graph_backward(g);
            size_t off = 0;
            for (int i = 0; i < nx; i++) {
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
        if (!isfinite(a[i])) return INFINITY;
        e = fmax(e, fabs((double)a[i] - b[i]));
        m = fmax(m, fabs(b[i]));
    }
    return e / m;
}

static void check_equal(vt_test *T, const hcase *c) {
    int ndim[GC_MAXX], shape[GC_MAXX][VT_MAXDIM];
    const int nx = operands(c, ndim, shape);
    size_t ng = 0;
    for (int i = 0; i < nx; i++) ng += (size_t)vt_shape_numel(ndim[i], shape[i]);
    const size_t no = (size_t)c->B * c->N * c->dim;
    float *o1 = malloc(sizeof(float) * no), *o2 = malloc(sizeof(float) * no);
    float *g1 = malloc(sizeof(float) * ng), *g2 = malloc(sizeof(float) * ng);
    for (int train = 0; train < 2; train++) {
        vt_err e1 = {{0}}, e2 = {{0}};
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
    hcase h;
} fd_case;

static vt_tensor *b_gc(vt_graph *g, vt_tensor **x, const gc_case *gc) {
    const hcase *c = &((const fd_case *)(const void *)gc)->h;
    const ops_in o = split_operands(c, x);
    return fused(g, c, &o);
}

static void check_fd(vt_test *T, const hcase *tab, int n) {
    for (int i = 0; i < n; i++) {
        fd_case f = {.gc = {.name = tab[i].name, .build = b_gc}, .h = tab[i]};
        f.gc.nx = operands(&f.h, f.gc.ndim, f.gc.shape);
        gc_run(T, &f.gc);
    }
}

/* The builder's errors name the op and the problem. */
static void check_errors(vt_test *T) {
    struct {
        const char *want;
        int qs[3], kvs[3], ws[4], wnd, H, dim, q_off, k_off, v_off, klead, kh, kw, chh;
    } E[] = {
        {"even", {2, 5, 24}, {0}, {1, 1, 3, 3}, 4, 3, 12, 0, 6, 12, 1, 2, 2, 0},         /* 3 heads */
        {"disjoint", {2, 5, 24}, {0}, {2, 1, 3, 3}, 4, 4, 12, 0, 4, 12, 1, 2, 2, 0},     /* k overlaps q */
        {"inside", {2, 5, 20}, {0}, {2, 1, 3, 3}, 4, 4, 12, 0, 6, 12, 1, 2, 2, 0},       /* v beyond 20 */
        {"grid", {2, 5, 24}, {0}, {2, 1, 3, 3}, 4, 4, 12, 0, 6, 12, 0, 2, 2, 0},         /* 4 grid keys of 5 */
        {"batch", {2, 5, 6}, {3, 4, 18}, {2, 1, 3, 3}, 4, 4, 12, 0, 0, 6, 0, 2, 2, 0},   /* kv batch 3 */
        {"IHH weight", {2, 5, 24}, {0}, {2, 2, 3, 3}, 4, 4, 12, 0, 6, 12, 1, 2, 2, 0},   /* not depthwise */
        {"CHH weight", {2, 5, 24}, {0}, {2, 2, 3, 3}, 4, 4, 12, 0, 6, 12, 1, 2, 2, 1},   /* 3x3 CHH */
    };
    for (size_t i = 0; i < sizeof E / sizeof E[0]; i++) {
        vt_err e = {{0}};
        vt_params *P = vt_params_new(&e);
        vt_graph *g = vt_graph_new(P, 1, &e);
        vt_tensor *q = vt_input(g, "q", 3, E[i].qs), *kv = E[i].kvs[0] ? vt_input(g, "kv", 3, E[i].kvs) : NULL;
        vt_tensor *w = vt_input(g, "w", E[i].wnd, E[i].ws);
        const vt_hattn_args a = {.heads = E[i].H, .dim = E[i].dim, .q_off = E[i].q_off, .k_off = E[i].k_off,
                                 .v_off = E[i].v_off, .klead = E[i].klead, .kh = E[i].kh, .kw = E[i].kw,
                                 .scale = 1.0f, .ihh_w = E[i].chh ? NULL : w, .chh_w = E[i].chh ? w : NULL};
        vt_tensor *y = vt_hallucinated_attention(g, q, kv, &a);
        T_CHECK(T, !y && strstr(g->err.msg, "hallucinated_attention") && strstr(g->err.msg, E[i].want),
                "error case %zu: got '%s'", i, g->err.msg);
        vt_graph_free(g);
        vt_params_free(P);
    }
    vt_err e = {{0}};
    vt_params *P = vt_params_new(&e);
    vt_graph *g = vt_graph_new(P, 1, &e);
    const int qs[3] = {1, 4, 24}, bs[1] = {2};
    const vt_hattn_args a = {.heads = 4, .dim = 12, .k_off = 6, .v_off = 12, .kh = 2, .kw = 2, .scale = 1.0f,
                             .ihh_b = vt_input(g, "b", 1, bs)};
    T_CHECK(T, !vt_hallucinated_attention(g, vt_input(g, "q", 3, qs), NULL, &a) && strstr(g->err.msg, "without"),
            "a bias without its weight must fail: %s", g->err.msg);
    vt_graph_free(g);
    vt_params_free(P);
}

void test_ops_hattn(vt_test *T) {
    /*  name              B   N    M   Lq  Lkv H  dim q_off k_off v_off lead kh  kw ihh chh bias first scale */
    static const hcase eq[] = {
        {"deit_packed", 2, 13, 0, 32, 0, 4, 16, 0, 8, 16, 1, 3, 4, 1, 1, 1, 0, 0.5f},
        {"pvt_sep_kv", 3, 20, 6, 8, 24, 4, 16, 0, 0, 8, 0, 2, 3, 1, 1, 1, 0, 0.5f},
        {"chh_first_b1", 1, 9, 0, 48, 0, 6, 24, 0, 12, 24, 0, 3, 3, 1, 1, 1, 1, 0.4f},
        {"ihh_only_v_first", 2, 7, 5, 6, 24, 4, 12, 0, 12, 0, 1, 2, 2, 1, 0, 1, 0, 0.6f},
        {"chh_only", 2, 10, 0, 24, 0, 4, 12, 0, 6, 12, 0, 0, 0, 0, 1, 1, 0, 0.5f},
        {"copy", 3, 6, 0, 16, 0, 2, 8, 4, 0, 8, 0, 0, 0, 0, 0, 0, 0, 0.5f},          /* q after k */
        {"no_bias", 2, 13, 0, 32, 0, 4, 16, 0, 8, 16, 1, 3, 4, 1, 1, 0, 1, 0.5f},
        /* 8·169·169 probabilities: two tiles of TILE_FLOATS (hattn.c) per entry */
        {"tiles_by_entry", 2, 169, 0, 32, 0, 8, 16, 0, 8, 16, 1, 12, 14, 1, 1, 1, 0, 0.7f},
        {"tiles_one_entry", 1, 169, 0, 32, 0, 8, 16, 0, 8, 16, 1, 12, 14, 1, 1, 1, 1, 0.7f},
        {"tiles_odd_batch", 3, 150, 49, 4, 12, 4, 8, 0, 0, 4, 0, 7, 7, 1, 1, 1, 0, 0.7f},
        {"n1_m1_chh", 3, 1, 1, 4, 12, 4, 8, 0, 0, 4, 0, 0, 0, 0, 1, 1, 0, 0.5f},  /* one query, one key */
        {"grid_1x1", 2, 3, 1, 4, 12, 4, 8, 0, 0, 4, 0, 1, 1, 1, 1, 1, 1, 0.5f},   /* IHH on a 1x1 grid */
        /* 8 computed heads: CHH as a GEMM (CHH_GEMM in hattn.c) */
        {"chh_gemm", 2, 10, 0, 64, 0, 16, 32, 0, 16, 32, 1, 3, 3, 1, 1, 1, 0, 0.5f},
        {"chh_gemm_first_b1", 1, 12, 6, 16, 48, 16, 32, 0, 0, 16, 0, 2, 3, 1, 1, 1, 1, 0.5f},
    };
    for (size_t i = 0; i < sizeof eq / sizeof eq[0]; i++) check_equal(T, &eq[i]);
    /* a bias of the last stage with every key of a row in its reach shifts whole rows before the softmax: its
     * gradient is zero up to rounding, so such cases leave the biases out */
    static const hcase fd[] = {
        {"fd_deit_packed", 2, 5, 0, 16, 0, 4, 8, 0, 4, 8, 1, 2, 2, 1, 1, 1, 1, 0.5f},
        {"fd_pvt_ihh_chh", 1, 4, 6, 4, 12, 4, 8, 0, 0, 4, 0, 2, 3, 1, 1, 0, 0, 0.5f},
        {"fd_ihh_only", 2, 7, 0, 8, 0, 2, 4, 0, 2, 4, 1, 2, 3, 1, 0, 1, 0, 0.8f},
        {"fd_copy", 2, 3, 0, 8, 0, 2, 4, 0, 2, 4, 0, 0, 0, 0, 0, 0, 0, 0.8f},
        {"fd_chh_gemm", 1, 5, 0, 32, 0, 16, 16, 0, 8, 16, 1, 2, 2, 1, 1, 1, 1, 0.5f},
    };
    check_fd(T, fd, (int)(sizeof fd / sizeof fd[0]));
    check_errors(T);
}
