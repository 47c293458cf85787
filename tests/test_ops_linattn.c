/* vt_linear_attention (linattn.c, FLatten's fused core): finite-difference gradients (odd sizes, N = 1, n ≠ N,
 * 1 and 3 heads, values at a channel offset of a wider tensor, an add on all or the last rows); equality with the
 * plain chain of single ops that FLatten used before (forward and every gradient, train and eval graphs, sizes that
 * split every pass into row chunks and 128-row blocks); the builder's errors. The focused mode
 * (vt_linear_attention_ex with a scale): finite differences on a packed qkv and on separate q, kv with n ≠ N, and
 * equality with vt_focus_ex + vt_linear_attention (every gradient, chunked passes, several blocks of focused rows);
 * FLatten's DWC fused into it in inference graphs against the op with the DWC's chain as its add term. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gradcheck.h"
#include "vitc/ops.h"

/* The plain chain: split heads, k̄ = mean(k), z = (q·k̄ + 1e-6)^-1, KV = kᵀv/n, o = (q·KV)·z, merge heads, add on the
 * last rows through slice/add/concat. */
static vt_tensor *plain(vt_graph *g, vt_tensor *q, vt_tensor *k, vt_tensor *v, int H, int v_off, vt_tensor *add) {
    const int B = q->shape[0], N = q->shape[1], C = q->shape[2], n = k->shape[1], d = C / H;
    vt_tensor *qh = vt_split_heads(g, q, 0, H, d), *kh = vt_split_heads(g, k, 0, H, d);
    vt_tensor *vh = vt_split_heads(g, v, v_off, H, d);
    const int ms[4] = {B, H, d, 1};
    vt_tensor *kmean = vt_reshape(g, vt_mean(g, kh, 2), 4, ms);
    vt_tensor *z = vt_unary(g, vt_affine(g, vt_matmul(g, qh, kmean, 0, 0, 1.0f), 1.0f, 1e-6f), VT_POW, -1.0f);
    vt_tensor *kv = vt_matmul(g, kh, vh, 1, 0, 1.0f / (float)n);
    vt_tensor *o = vt_merge_heads(g, vt_mul(g, vt_matmul(g, qh, kv, 0, 0, 1.0f), z));
    if (!add) return o;
    const int Na = add->shape[1], lead = N - Na;
    if (!lead) return vt_add(g, o, add);
    vt_tensor *parts[2] = {vt_slice(g, o, 1, 0, lead), vt_add(g, vt_slice(g, o, 1, lead, Na), add)};
    return vt_concat(g, parts, 2, 1);
}

/* x0 q, x1 k, x2 v (values at channel ia[1]), x3 add when ia[2]; ia[0] heads; ia[3] 1: the plain chain. */
static vt_tensor *b_la(vt_graph *g, vt_tensor **x, const gc_case *c) {
    vt_tensor *add = c->ia[2] ? x[3] : NULL;
    return c->ia[3] ? plain(g, x[0], x[1], x[2], c->ia[0], c->ia[1], add)
                    : vt_linear_attention(g, x[0], x[1], x[2], c->ia[0], c->ia[1], add);
}

/* q, k positive in [0.2, 2.2] (as focused features are); v and add N(0, 1). */
static void fill_la(float *d, int64_t n, int which, vt_rng *r) {
    for (int64_t i = 0; i < n; i++) d[i] = which < 2 ? 0.2f + 2.0f * vt_rng_uniform(r) : vt_rng_normal(r);
}

/* Focused: x0 q and, when ia[1], k and v too (packed qkv at channels 0, C, 2C), else x3 kv (B, n, 2C); x1 scale,
 * x2 pe when ia[2], x4 add when ia[3]; ia[0] heads; q read at channel ia[4] of x0 when not packed. */
static vt_tensor *b_la_focus(vt_graph *g, vt_tensor **x, const gc_case *c) {
    const int C = x[1]->shape[2];
    vt_tensor *kv = c->ia[1] ? x[0] : x[3];
    const vt_linattn_args a = {.heads = c->ia[0], .q_off = c->ia[1] ? 0 : c->ia[4], .k_off = c->ia[1] ? C : 0,
                               .v_off = c->ia[1] ? 2 * C : C, .C = C, .add = c->ia[3] ? x[4] : NULL, .scale = x[1],
                               .pe = c->ia[2] ? x[2] : NULL, .p = 3.0f};
    return vt_linear_attention_ex(g, x[0], kv, kv, &a);
}

/* Raw q, k, v: N(0, 1) kept 0.05 away from the ReLU kink; scale N(0, 1); pe 0 (x + pe stays off the kink; its
 * gradient is still checked); add N(0, 1). */
static void fill_focus(float *d, int64_t n, int which, vt_rng *r) {
    for (int64_t i = 0; i < n; i++) {
        float v = vt_rng_normal(r);
        if (which == 2) v = 0.0f;
        while ((which == 0 || which == 3) && fabsf(v) < 0.05f) v = vt_rng_normal(r);
        d[i] = v;
    }
}

static const gc_case la_cases[] = {
    {.name = "linattn_focus_packed_pe", .nx = 3, .ndim = {3, 3, 3}, .shape = {{2, 5, 18}, {1, 1, 6}, {1, 5, 6}},
     .build = b_la_focus, .ia = {3, 1, 1}, .fill = fill_focus, .eps = 1e-3},
    {.name = "linattn_focus_q_kv_add", .nx = 5, .ndim = {3, 3, 3, 3, 3},
     .shape = {{2, 4, 9}, {1, 1, 6}, {1, 7, 6}, {2, 7, 12}, {2, 3, 6}}, .build = b_la_focus, .ia = {2, 0, 1, 1, 2},
     .fill = fill_focus, .eps = 1e-3},
    {.name = "linattn_focus_nope_h1", .nx = 4, .ndim = {3, 3, 3, 3}, .shape = {{1, 6, 5}, {1, 1, 5}, {1, 1, 1},
     {1, 3, 10}}, .build = b_la_focus, .ia = {1, 0, 0, 0, 0}, .nograd = {0, 0, 1}, .fill = fill_focus, .eps = 1e-3},
    {.name = "linattn_h3", .nx = 3, .ndim = {3, 3, 3}, .shape = {{2, 5, 6}, {2, 5, 6}, {2, 5, 6}}, .build = b_la,
     .ia = {3}, .fill = fill_la},
    {.name = "linattn_h1_odd", .nx = 3, .ndim = {3, 3, 3}, .shape = {{1, 7, 5}, {1, 7, 5}, {1, 7, 5}}, .build = b_la,
     .ia = {1}, .fill = fill_la},
    {.name = "linattn_N1", .nx = 3, .ndim = {3, 3, 3}, .shape = {{2, 1, 6}, {2, 1, 6}, {2, 1, 6}}, .build = b_la,
     .ia = {3}, .fill = fill_la},
    {.name = "linattn_N1_n4", .nx = 3, .ndim = {3, 3, 3}, .shape = {{2, 1, 6}, {2, 4, 6}, {2, 4, 6}}, .build = b_la,
     .ia = {2}, .fill = fill_la},
    {.name = "linattn_N3_n7", .nx = 3, .ndim = {3, 3, 3}, .shape = {{1, 3, 9}, {1, 7, 9}, {1, 7, 9}}, .build = b_la,
     .ia = {3}, .fill = fill_la},
    {.name = "linattn_v_off", .nx = 3, .ndim = {3, 3, 3}, .shape = {{2, 5, 6}, {2, 5, 6}, {2, 5, 15}}, .build = b_la,
     .ia = {3, 4}, .fill = fill_la},
    {.name = "linattn_add_all", .nx = 4, .ndim = {3, 3, 3, 3}, .shape = {{2, 4, 6}, {2, 4, 6}, {2, 4, 6}, {2, 4, 6}},
     .build = b_la, .ia = {3, 0, 1}, .fill = fill_la},
    {.name = "linattn_add_last_voff", .nx = 4, .ndim = {3, 3, 3, 3},
     .shape = {{2, 5, 6}, {2, 5, 6}, {2, 5, 13}, {2, 3, 6}}, .build = b_la, .ia = {3, 7, 1}, .fill = fill_la},
};

/* An array of a run: the output's values or a tensor's gradient (malloc'd; NULL when absent) and its length. */
typedef struct {
    float *v;
    int64_t n;
} arr;

/* res[0] = y's values, res[t] = outs[t]'s gradient (train graphs only), for the n tensors outs (y first). */
static void collect(vt_tensor *const *outs, int n, int train, arr *res) {
    for (int t = 0; t < n; t++) {
        res[t] = (arr){NULL, outs[t] ? outs[t]->numel : 0};
        if (!outs[t] || (t && !train)) continue;
        res[t].v = malloc(sizeof(float) * (size_t)res[t].n);
        if (res[t].v) memcpy(res[t].v, t ? outs[t]->grad : outs[t]->data, sizeof(float) * (size_t)res[t].n);
    }
}

/* The n arrays of two runs agree to 1e-5 relative to b's largest entry, which is non-zero; frees both. */
static void compare(vt_test *T, const char *what_run, size_t s, int train, const char *const *what, arr *a, arr *b,
                    int n) {
    for (int t = 0; t < n; t++) {
        if (a[t].v && b[t].v) {
            double err = 0.0, mx = 0.0;
            for (int64_t i = 0; i < b[t].n; i++) {
                err = t_worse(err, fabs((double)a[t].v[i] - b[t].v[i]));
                mx = fmax(mx, fabs(b[t].v[i]));
            }
            T_CHECK(T, mx > 0.0 && err <= 1e-5 * mx, "%s size %zu train %d, %s: max diff %g (scale %g)", what_run, s,
                    train, what[t], err, mx);
        } else {
            T_CHECK(T, !a[t].v && !b[t].v, "%s size %zu train %d: %s present in one run only", what_run, s, train,
                    what[t]);
        }
        free(a[t].v);
        free(b[t].v);
    }
}

/* Runs the fused op or the plain chain with loss sum(y·r); res gets the output then the gradients of q, k, v, add. */
static int run(int fused, int train, int B, int N, int n, int H, int d, int Lv, int v_off, int Na, arr *res) {
    vt_err e = {0};
    vt_params *P = vt_params_new(&e);
    vt_graph *g = vt_graph_new(P, train, &e);
    const int C = H * d, qs[3] = {B, N, C}, ks[3] = {B, n, C}, vs[3] = {B, n, Lv}, as[3] = {B, Na, C};
    const vt_init z = {VT_INIT_ZERO, 0};
    vt_tensor *q = vt_param(g, "q", 3, qs, z), *k = vt_param(g, "k", 3, ks, z), *v = vt_param(g, "v", 3, vs, z);
    vt_tensor *add = Na ? vt_param(g, "add", 3, as, z) : NULL;
    vt_tensor *y = fused ? vt_linear_attention(g, q, k, v, H, v_off, add) : plain(g, q, k, v, H, v_off, add);
    vt_tensor *r = vt_input(g, "r", 3, qs);
    if (train) vt_graph_set_loss(g, vt_sum(g, vt_mul(g, y, r)));
    vt_graph_output(g, y);
    int ok = vt_graph_finalize(g, &e) == 0;
    if (ok) {
        vt_rng rng;
        vt_rng_seed(&rng, 11);
        vt_tensor *ts[4] = {q, k, v, add};
        for (int t = 0; t < 4; t++)
            for (int64_t i = 0; ts[t] && i < ts[t]->numel; i++)
                ts[t]->data[i] = t < 2 ? 0.2f + 2.0f * vt_rng_uniform(&rng) : vt_rng_normal(&rng);
        for (int64_t i = 0; i < r->numel; i++) r->data[i] = vt_rng_normal(&rng);
        vt_graph_forward(g);
        if (train) {
            vt_params_zero_grad(P);
            vt_graph_backward(g);
        }
        vt_tensor *outs[5] = {y, q, k, v, add};
        collect(outs, 5, train, res);
    }
    vt_graph_free(g);
    vt_params_free(P);
    return ok;
}

/* Fused equals plain to 1e-5 relative to each array's largest entry, for sizes that split KV over key chunks, the
 * outputs over query chunks with several LA_RB-row blocks, with n ≠ N, 1 and 3 heads, v offsets and adds. */
static void check_matches_plain(vt_test *T) {
    static const struct {
        int B, N, n, H, d, Lv, v_off, Na;
    } sz[] = {
        {2, 37, 37, 3, 4, 24, 6, 37},   /* v inside a wider tensor, add on every row */
        {1, 1000, 1000, 3, 8, 24, 0, 0},  /* batch 1, 3 heads: chunked passes, 128-row blocks */
        {1, 300, 200, 1, 16, 16, 0, 299}, /* n ≠ N, one head, add on the last rows */
        {3, 49, 49, 6, 32, 192, 0, 48},  /* a Swin stage-2 window's shape, one lead token */
    };
    const char *what[5] = {"output", "dq", "dk", "dv", "dadd"};
    for (size_t s = 0; s < sizeof sz / sizeof sz[0]; s++)
        for (int train = 0; train < 2; train++) {
            arr a[5], b[5];
            const int ok = run(1, train, sz[s].B, sz[s].N, sz[s].n, sz[s].H, sz[s].d, sz[s].Lv, sz[s].v_off, sz[s].Na,
                               a) &
                           run(0, train, sz[s].B, sz[s].N, sz[s].n, sz[s].H, sz[s].d, sz[s].Lv, sz[s].v_off, sz[s].Na,
                               b);
            T_CHECK(T, ok, "size %zu: build failed", s);
            if (ok) compare(T, "fused vs plain", s, train, what, a, b, 5);
        }
}

/* Focused op or vt_focus_ex + vt_linear_attention, loss sum(y·r); res: output, then the gradients of q (or qkv), kv
 * (packed: none), scale, pe, add. */
static int run_focus(int fused, int train, int B, int N, int n, int H, int d, int packed, int pe_on, int Na,
                     arr *res) {
    vt_err e = {0};
    vt_params *P = vt_params_new(&e);
    vt_graph *g = vt_graph_new(P, train, &e);
    const int C = H * d, qo = packed ? 0 : 2, ko = packed ? C : 0, vo = packed ? 2 * C : C;
    const int qs[3] = {B, N, packed ? 3 * C : C + 3}, kvs[3] = {B, n, 2 * C}, ss[3] = {1, 1, C}, ps[3] = {1, n, C};
    const int as[3] = {B, Na, C}, os[3] = {B, N, C};
    const vt_init z = {VT_INIT_ZERO, 0};
    vt_tensor *q = vt_param(g, "q", 3, qs, z), *kv = packed ? q : vt_param(g, "kv", 3, kvs, z);
    vt_tensor *sc = vt_param(g, "scale", 3, ss, z), *pe = pe_on ? vt_param(g, "pe", 3, ps, z) : NULL;
    vt_tensor *add = Na ? vt_param(g, "add", 3, as, z) : NULL, *y;
    if (fused) {
        const vt_linattn_args a = {.heads = H, .q_off = qo, .k_off = ko, .v_off = vo, .C = C, .add = add,
                                   .scale = sc, .pe = pe, .p = 3.0f};
        y = vt_linear_attention_ex(g, q, kv, kv, &a);
    } else {
        vt_tensor *fq = vt_focus_ex(g, q, qo, C, NULL, sc, 3.0f), *fk = vt_focus_ex(g, kv, ko, C, pe, sc, 3.0f);
        y = vt_linear_attention(g, fq, fk, kv, H, vo, add);
    }
    vt_tensor *r = vt_input(g, "r", 3, os);
    if (train) vt_graph_set_loss(g, vt_sum(g, vt_mul(g, y, r)));
    vt_graph_output(g, y);
    int ok = vt_graph_finalize(g, &e) == 0;
    vt_tensor *outs[6] = {y, q, packed ? NULL : kv, sc, pe, add};
    if (ok) {
        vt_rng rng;
        vt_rng_seed(&rng, 5);
        for (int t = 1; t < 6; t++)
            for (int64_t i = 0; outs[t] && i < outs[t]->numel; i++)
                outs[t]->data[i] = (t >= 3 ? 0.5f : 1.0f) * vt_rng_normal(&rng);
        for (int64_t i = 0; i < r->numel; i++) r->data[i] = vt_rng_normal(&rng);
        vt_graph_forward(g);
        if (train) {
            vt_params_zero_grad(P);
            vt_graph_backward(g);
        }
        collect(outs, 6, train, res);
    }
    vt_graph_free(g);
    vt_params_free(P);
    return ok;
}

/* The focused op equals vt_focus_ex + vt_linear_attention to 1e-5 relative to each array's largest entry: packed
 * qkv and separate q, kv (n ≠ N), with and without pe and add, batch 1 and 3, C 96 (128-row blocks) and 384 (42-row
 * blocks), sizes that chunk every pass. */
static void check_focus_matches_chain(vt_test *T) {
    static const struct {
        int B, N, n, H, d, packed, pe, Na;
    } sz[] = {
        {1, 1000, 1000, 3, 32, 1, 1, 1000}, /* FLatten-Swin stage 1 at batch 1: chunks, 128-row blocks */
        {3, 300, 200, 2, 16, 0, 1, 0},      /* n ≠ N, pe rows owned by key chunks over 3 batch items */
        {2, 97, 97, 6, 64, 1, 0, 96},       /* C 384: 42-row blocks, a lead token without add */
    };
    const char *what[6] = {"output", "dq", "dkv", "dscale", "dpe", "dadd"};
    for (size_t s = 0; s < sizeof sz / sizeof sz[0]; s++)
        for (int train = 0; train < 2; train++) {
            arr a[6], b[6];
            const int ok = run_focus(1, train, sz[s].B, sz[s].N, sz[s].n, sz[s].H, sz[s].d, sz[s].packed, sz[s].pe,
                                     sz[s].Na, a) &
                           run_focus(0, train, sz[s].B, sz[s].N, sz[s].n, sz[s].H, sz[s].d, sz[s].packed, sz[s].pe,
                                     sz[s].Na, b);
            T_CHECK(T, ok, "focus size %zu: build failed", s);
            if (ok) compare(T, "focused vs chain", s, train, what, a, b, 6);
        }
}

/* The focused op with FLatten's DWC fused (inference graphs) or the chain: a C-channel vt_dwconv_nhwc_ex over the
 * values' grid rows (its kernel the d-channel one tiled over the heads) as the add term. Packed qkv (B, N, 3C), N =
 * lead + gh·gw. lepe (lead 0): FLatten-CSwin's LePE too, a 3x3 per channel, in the op's DWC or as a conv adding
 * the op's output. res[0] gets the output; *macs the graph's MACs. */
static int run_dwc(int fused, int lepe, int B, int lead, int gh, int gw, int H, int d, int K, arr *res,
                   int64_t *macs) {
    vt_err e = {0};
    vt_params *P = vt_params_new(&e);
    vt_graph *g = vt_graph_new(P, 0, &e);
    const int C = H * d, N = lead + gh * gw, qs[3] = {B, N, 3 * C}, ss[3] = {1, 1, C}, ps[3] = {1, N, C};
    const int ws[4] = {fused ? d : C, 1, K, K}, bs[1] = {fused ? d : C}, gs[4] = {B, gh, gw, C};
    const int as[3] = {B, gh * gw, C};
    const vt_init z = {VT_INIT_ZERO, 0};
    vt_tensor *qkv = vt_param(g, "qkv", 3, qs, z), *sc = vt_param(g, "scale", 3, ss, z);
    vt_tensor *pe = vt_param(g, "pe", 3, ps, z), *w = vt_param(g, "w", 4, ws, z), *b = vt_param(g, "b", 1, bs, z);
    const int ls[4] = {C, 1, 3, 3}, ms[4] = {B, gh, gw, 3 * C};
    vt_tensor *lw = lepe ? vt_param(g, "lw", 4, ls, z) : NULL, *lb = lepe ? vt_param(g, "lb", 1, &C, z) : NULL;
    vt_linattn_args a = {.heads = H, .q_off = 0, .k_off = C, .v_off = 2 * C, .C = C, .scale = sc, .pe = pe, .p = 3.0f};
    if (fused) {
        a.dwc_w = w;
        a.dwc_b = b;
        a.grid_h = gh;
        a.grid_w = gw;
        a.lepe_w = lw;
        a.lepe_b = lb;
    } else {
        vt_tensor *vg = vt_slice(g, vt_slice(g, qkv, 2, 2 * C, C), 1, lead, gh * gw);
        a.add = vt_reshape(g, vt_dwconv_nhwc_ex(g, vt_reshape(g, vg, 4, gs), 0, w, b, K / 2, NULL), 3, as);
    }
    vt_tensor *y = vt_linear_attention_ex(g, qkv, qkv, qkv, &a);
    if (lepe && !fused) y = vt_reshape(g, vt_dwconv_nhwc_ex(g, vt_reshape(g, qkv, 4, ms), 2 * C, lw, lb, 1, y), 3, as);
    vt_graph_output(g, y);
    const int ok = y && vt_graph_finalize(g, &e) == 0;
    if (ok) {
        vt_rng rng;
        vt_rng_seed(&rng, 9);
        vt_tensor *ts[3] = {qkv, sc, pe};
        for (int t = 0; t < 3; t++)
            for (int64_t i = 0; i < ts[t]->numel; i++) ts[t]->data[i] = (t ? 0.5f : 1.0f) * vt_rng_normal(&rng);
        float kw[5 * 5 * 64], kb[64]; /* the d-channel kernel, tiled in the chain's C-channel weight */
        for (int i = 0; i < d * K * K; i++) kw[i] = 0.3f * vt_rng_normal(&rng);
        for (int i = 0; i < d; i++) kb[i] = vt_rng_normal(&rng);
        for (int c = 0; c < (fused ? d : C); c++) {
            memcpy(w->data + (size_t)c * K * K, kw + (size_t)(c % d) * K * K, sizeof(float) * (size_t)K * K);
            b->data[c] = kb[c % d];
        }
        for (int64_t i = 0; lepe && i < lw->numel; i++) lw->data[i] = 0.3f * vt_rng_normal(&rng);
        for (int64_t i = 0; lepe && i < lb->numel; i++) lb->data[i] = vt_rng_normal(&rng);
        vt_graph_forward(g);
        vt_tensor *outs[1] = {y};
        collect(outs, 1, 0, res);
        *macs = vt_graph_macs(g);
    }
    vt_graph_free(g);
    vt_params_free(P);
    return ok;
}

/* The DWC inside the op equals the chain to 1e-5 relative, MACs included: a class token before the grid (a block
 * of its own), batch 1 (query chunks of a few grid rows) and 3, C 384 (blocks of 42 rows: three 14-pixel grid rows;
 * one 50-pixel row when the grid is wider), K 3 and 5; with a LePE (its taps in the DWC's centre) at K 3 and 5. */
static void check_dwc_fused(vt_test *T) {
    static const struct {
        int B, lead, gh, gw, H, d, K, lepe;
    } sz[] = {{2, 1, 7, 9, 3, 8, 5, 0},    {1, 0, 40, 30, 2, 16, 3, 0}, {3, 1, 14, 14, 6, 64, 5, 0},
              {1, 0, 3, 50, 6, 64, 3, 0},  {2, 0, 7, 9, 3, 8, 5, 1},    {1, 0, 12, 12, 2, 32, 3, 1},
              {2, 0, 14, 14, 4, 16, 5, 1}};
    const char *what[1] = {"output"};
    for (size_t s = 0; s < sizeof sz / sizeof sz[0]; s++) {
        arr a[1], b[1];
        int64_t ma = 0, mb = 0;
        const int ok =
            run_dwc(1, sz[s].lepe, sz[s].B, sz[s].lead, sz[s].gh, sz[s].gw, sz[s].H, sz[s].d, sz[s].K, a, &ma) &
            run_dwc(0, sz[s].lepe, sz[s].B, sz[s].lead, sz[s].gh, sz[s].gw, sz[s].H, sz[s].d, sz[s].K, b, &mb);
        T_CHECK(T, ok, "fused DWC size %zu: build failed", s);
        if (!ok) continue;
        T_CHECK(T, ma == mb, "fused DWC size %zu: MACs %lld, the chain's %lld", s, (long long)ma, (long long)mb);
        compare(T, "fused DWC vs chain", s, 0, what, a, b, 1);
    }
    /* refused: a training graph, with an add term, an even kernel, a grid larger than the rows */
    vt_err e = {0};
    vt_params *P = vt_params_new(&e);
    const int qs[3] = {1, 10, 18}, ss[1] = {6}, ws[4] = {2, 1, 3, 3}, w2[4] = {2, 1, 2, 2}, bs[1] = {2};
    for (int c = 0; c < 4; c++) {
        vt_graph *g = vt_graph_new(P, c == 0, &e);
        vt_tensor *qkv = vt_input(g, "qkv", 3, qs), *w = vt_input(g, "w", 4, c == 2 ? w2 : ws);
        vt_linattn_args a = {.heads = 3, .k_off = 6, .v_off = 12, .C = 6, .scale = vt_input(g, "s", 1, ss), .p = 3,
                             .dwc_w = w, .dwc_b = vt_input(g, "b", 1, bs), .grid_h = 3, .grid_w = c == 3 ? 4 : 3};
        if (c == 1) a.add = vt_input(g, "a", 3, (const int[3]){1, 9, 6});
        vt_tensor *r = vt_linear_attention_ex(g, qkv, qkv, qkv, &a);
        T_CHECK(T, r == NULL && strstr(g->err.msg, "fused DWC") && strstr(g->err.msg, "inference graphs"),
                "fused DWC error case %d: '%s'", c, g->err.msg);
        vt_graph_free(g);
    }
    /* a LePE refused: without the fused DWC, of the wrong width */
    const int ls[4] = {6, 1, 3, 3}, l4[4] = {4, 1, 3, 3}, ns[1] = {6};
    for (int c = 0; c < 2; c++) {
        vt_graph *g = vt_graph_new(P, 0, &e);
        vt_tensor *qkv = vt_input(g, "qkv", 3, qs);
        vt_linattn_args a = {.heads = 3, .k_off = 6, .v_off = 12, .C = 6, .scale = vt_input(g, "s", 1, ss), .p = 3,
                             .lepe_w = vt_input(g, "lw", 4, c ? l4 : ls), .lepe_b = vt_input(g, "lb", 1, ns)};
        if (c) {
            a.dwc_w = vt_input(g, "w", 4, ws);
            a.dwc_b = vt_input(g, "b", 1, bs);
            a.grid_h = a.grid_w = 3;
        }
        vt_tensor *r = vt_linear_attention_ex(g, qkv, qkv, qkv, &a);
        T_CHECK(T, r == NULL && strstr(g->err.msg, "LePE") && strstr(g->err.msg, "(6, 1, 3, 3)"),
                "LePE error case %d: '%s'", c, g->err.msg);
        vt_graph_free(g);
    }
    vt_params_free(P);
}

/* Shape errors and shared memory are refused with the op's name and the shapes. */
static void check_errors(vt_test *T) {
    vt_err e = {0};
    vt_params *P = vt_params_new(&e);
    const int s6[3] = {2, 5, 6}, s7[3] = {2, 4, 6}, s8[3] = {2, 5, 8}, s9[3] = {2, 6, 6};
    struct {
        int which;
        const char *want;
    } cases[] = {{0, "divisible by 4 heads"}, {1, "(2, 4, 6)"}, {2, "inside v"}, {3, "Na <= N"}, {4, "shares memory"},
                 {5, "shares memory"}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        vt_graph *g = vt_graph_new(P, 1, &e);
        vt_tensor *q = vt_input(g, "q", 3, s6), *k = vt_input(g, "k", 3, s6), *v = vt_input(g, "v", 3, s6), *r;
        switch (cases[c].which) {
        case 0: r = vt_linear_attention(g, q, k, v, 4, 0, NULL); break;
        case 1: r = vt_linear_attention(g, q, k, vt_input(g, "v4", 3, s7), 3, 0, NULL); break;
        case 2: r = vt_linear_attention(g, q, k, vt_input(g, "v8", 3, s8), 3, 3, NULL); break;
        case 3: r = vt_linear_attention(g, q, k, v, 3, 0, vt_input(g, "a", 3, s9)); break;
        case 4: r = vt_linear_attention(g, q, k, k, 3, 0, NULL); break;
        default: r = vt_linear_attention(g, q, k, v, 3, 0, v); break;
        }
        T_CHECK(T, r == NULL && strstr(g->err.msg, "linear_attention") && strstr(g->err.msg, cases[c].want),
                "error case %zu: '%s'", c, g->err.msg);
        vt_graph_free(g);
    }
    vt_params_free(P);
}

/* vt_linear_attention_ex's own refusals: the focus's arguments, channel ranges, and v overlapping q's or k's range in
 * one packed tensor (a disjoint range of the same tensor is accepted). */
static void check_errors_ex(vt_test *T) {
    vt_err e = {0};
    vt_params *P = vt_params_new(&e);
    const int sp[3] = {2, 5, 18}, s6[1] = {6}, s5[1] = {5}, pe6[3] = {1, 5, 6}, pe4[3] = {1, 4, 6};
    struct {
        int which;
        const char *want;
    } cases[] = {{0, "required with a positional"}, {1, "C = 6 values"}, {2, "exponent 0 > 0"},
                 {3, "n·C = 5·6 values"}, {4, "shares memory"}, {5, "inside v"}, {6, NULL}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        vt_graph *g = vt_graph_new(P, 1, &e);
        vt_tensor *qkv = vt_input(g, "qkv", 3, sp), *sc = vt_input(g, "s", 1, s6), *pe = vt_input(g, "pe", 3, pe6);
        vt_linattn_args a = {.heads = 3, .q_off = 0, .k_off = 6, .v_off = 12, .C = 6, .scale = sc, .pe = pe, .p = 3};
        switch (cases[c].which) {
        case 0: a.scale = NULL; break;
        case 1: a.scale = vt_input(g, "s5", 1, s5); break;
        case 2: a.p = 0.0f; break;
        case 3: a.pe = vt_input(g, "pe4", 3, pe4); break;
        case 4: a.v_off = 9; break; /* overlaps k's channels [6, 12) */
        case 5: a.v_off = 13; break;
        default: break;
        }
        vt_tensor *r = vt_linear_attention_ex(g, qkv, qkv, qkv, &a);
        if (cases[c].want)
            T_CHECK(T, r == NULL && strstr(g->err.msg, "linear_attention") && strstr(g->err.msg, cases[c].want),
                    "ex error case %zu: '%s'", c, g->err.msg);
        else
            T_CHECK(T, r != NULL, "packed qkv with disjoint ranges refused: '%s'", g->err.msg);
        vt_graph_free(g);
    }
    vt_params_free(P);
}

void test_ops_linattn(vt_test *T) {
    check_errors(T);
    check_errors_ex(T);
    check_matches_plain(T);
    check_focus_matches_chain(T);
    check_dwc_fused(T);
    for (size_t i = 0; i < sizeof la_cases / sizeof la_cases[0]; i++) gc_run(T, &la_cases[i]);
}
