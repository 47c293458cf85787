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

/* A case for gradcheck.c: gc_run and gc_compare hand build() the gc_case, the first member. */
typedef struct {
    gc_case gc;
    hcase h;
} fd_case;

static vt_tensor *b_fused(vt_graph *g, vt_tensor **x, const gc_case *gc) {
    const hcase *c = &((const fd_case *)(const void *)gc)->h;
    const ops_in o = split_operands(c, x);
    return fused(g, c, &o);
}

static vt_tensor *b_plain(vt_graph *g, vt_tensor **x, const gc_case *gc) {
    const hcase *c = &((const fd_case *)(const void *)gc)->h;
    const ops_in o = split_operands(c, x);
    return plain(g, c, &o);
}

/* The fused op against the plain chain: outputs and every gradient, eval and training graphs. */
static void check_equal(vt_test *T, const hcase *c) {
    fd_case f = {.gc = {.name = c->name, .build = b_fused}, .h = *c};
    fd_case p = {.gc = {.name = "the plain chain", .build = b_plain}, .h = *c};
    f.gc.nx = p.gc.nx = operands(c, f.gc.ndim, f.gc.shape);
    memcpy(p.gc.ndim, f.gc.ndim, sizeof f.gc.ndim);
    memcpy(p.gc.shape, f.gc.shape, sizeof f.gc.shape);
    gc_compare(T, &p.gc, &f.gc, 2e-5);
}

static void check_fd(vt_test *T, const hcase *tab, int n) {
    for (int i = 0; i < n; i++) {
        fd_case f = {.gc = {.name = tab[i].name, .build = b_fused}, .h = tab[i]};
        f.gc.nx = operands(&f.h, f.gc.ndim, f.gc.shape);
        gc_run(T, &f.gc);
    }
}

/* The builder's errors name the op and the problem. */
static void check_errors(vt_test *T) {
    /* w: the IHH weight (chh 0), the CHH weight (chh 1) or, alone, the IHH bias (chh 2) */
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
        {"without", {1, 4, 24}, {0}, {2}, 1, 4, 12, 0, 6, 12, 0, 2, 2, 2},               /* a bias alone */
    };
    for (size_t i = 0; i < sizeof E / sizeof E[0]; i++) {
        vt_err e = {0};
        vt_params *P = vt_params_new(&e);
        vt_graph *g = vt_graph_new(P, 1, &e);
        vt_tensor *q = vt_input(g, "q", 3, E[i].qs), *kv = E[i].kvs[0] ? vt_input(g, "kv", 3, E[i].kvs) : NULL;
        vt_tensor *w = vt_input(g, "w", E[i].wnd, E[i].ws);
        const vt_hattn_args a = {.heads = E[i].H, .dim = E[i].dim, .q_off = E[i].q_off, .k_off = E[i].k_off,
                                 .v_off = E[i].v_off, .klead = E[i].klead, .kh = E[i].kh, .kw = E[i].kw,
                                 .scale = 1.0f, .ihh_w = E[i].chh == 0 ? w : NULL, .chh_w = E[i].chh == 1 ? w : NULL,
                                 .ihh_b = E[i].chh == 2 ? w : NULL};
        vt_tensor *y = vt_hallucinated_attention(g, q, kv, &a);
        T_CHECK(T, !y && strstr(g->err.msg, "hallucinated_attention") && strstr(g->err.msg, E[i].want),
                "error case %zu: got '%s'", i, g->err.msg);
        vt_graph_free(g);
        vt_params_free(P);
    }
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
        {"grid_5x3", 2, 6, 15, 8, 24, 4, 16, 0, 0, 8, 0, 5, 3, 1, 1, 1, 0, 0.5f}, /* the narrowest unpadded grid */
        /* the fused rows' CHH unrolled for 1, 3 and 5 computed heads, the loop for 12 (hal_fused in hattn.c) */
        {"h2_1", 2, 10, 0, 16, 0, 2, 8, 0, 4, 8, 1, 3, 3, 1, 1, 1, 0, 0.5f},
        {"h2_3", 2, 10, 0, 24, 0, 6, 12, 0, 6, 12, 1, 3, 3, 1, 1, 1, 0, 0.5f},
        {"h2_5_tail", 1, 17, 0, 40, 0, 10, 20, 0, 10, 20, 1, 4, 4, 1, 1, 1, 0, 0.5f},
        {"h2_12", 1, 10, 0, 48, 0, 24, 24, 0, 12, 24, 1, 3, 3, 1, 1, 1, 0, 0.5f},
        /* grid rows of 14 keys: one vector each with AVX-512 (hal_rows in hattn.c; 1, 3, 5 and 12 computed heads,
         * separate keys); 15 keys: the flat grid (hal_fused) */
        {"rows_h2_1", 2, 43, 0, 16, 0, 2, 8, 0, 4, 8, 1, 3, 14, 1, 1, 1, 0, 0.5f},
        {"rows_h2_3", 2, 43, 0, 24, 0, 6, 12, 0, 6, 12, 1, 3, 14, 1, 1, 1, 0, 0.5f},
        {"rows_h2_5", 1, 43, 0, 40, 0, 10, 20, 0, 10, 20, 1, 3, 14, 1, 1, 1, 0, 0.5f},
        {"rows_h2_12", 1, 43, 0, 48, 0, 24, 24, 0, 12, 24, 1, 3, 14, 1, 1, 1, 0, 0.5f},
        {"rows_sep_kv", 2, 10, 56, 8, 24, 4, 16, 0, 0, 8, 0, 4, 14, 1, 1, 1, 0, 0.5f},
        {"flat_3x15", 1, 46, 0, 24, 0, 6, 12, 0, 6, 12, 1, 3, 15, 1, 1, 1, 0, 0.5f},
        /* grids of at most 64 keys and no lead keys: the tiles of register products with AVX-512 (hal_tile in
         * hattn.c): 1 to 4 key vectors, rows not a multiple of the tile's, 15 columns (taps 16 lanes away) */
        {"tile_7x7_h2_1", 2, 37, 49, 32, 96, 2, 64, 0, 0, 32, 0, 7, 7, 1, 1, 1, 0, 0.18f},
        {"tile_8x8_h2_5", 1, 23, 64, 40, 120, 10, 80, 0, 0, 40, 0, 8, 8, 1, 1, 1, 0, 0.35f},
        {"tile_3x15_no_bias", 2, 18, 45, 24, 72, 6, 48, 0, 0, 24, 0, 3, 15, 1, 1, 0, 0, 0.3f},
        {"tile_4x4_h2_12", 1, 9, 16, 48, 144, 24, 96, 0, 0, 48, 0, 4, 4, 1, 1, 1, 0, 0.5f},
        {"tile_packed_5x6", 2, 30, 0, 32, 0, 4, 16, 0, 8, 16, 0, 5, 6, 1, 1, 1, 0, 0.5f},
        {"flat_4x16", 1, 12, 64, 8, 24, 4, 16, 0, 0, 8, 0, 4, 16, 1, 1, 1, 0, 0.5f}, /* 16 columns: hal_fused */
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
        /* grids of at least 3x3: the unpadded IHH (corr3_grid, ihh_wgrad in hattn.c) */
        {"fd_grid_3x4", 1, 4, 12, 4, 12, 4, 8, 0, 0, 4, 0, 3, 4, 1, 1, 0, 0, 0.5f},
        {"fd_deit_3x3_ihh", 1, 10, 0, 16, 0, 4, 8, 0, 4, 8, 1, 3, 3, 1, 0, 1, 0, 0.8f},
        /* backward after hal_rows' forward */
        {"fd_rows_3x14", 1, 4, 42, 4, 12, 4, 8, 0, 0, 4, 0, 3, 14, 1, 1, 0, 0, 0.5f},
        /* backward after hal_tile's forward (3 x 14 above too) */
        {"fd_tile_3x5", 1, 6, 15, 8, 24, 4, 16, 0, 0, 8, 0, 3, 5, 1, 1, 0, 0, 0.5f},
    };
    check_fd(T, fd, (int)(sizeof fd / sizeof fd[0]));
    check_errors(T);
}
