/* The gathers of src/ops/window.c: window partition / reverse against a naive pad + roll + view/permute (torchvision's
 * construction, element by element) for shifted, padded and rectangular windows, both compositions with the identity,
 * the partition of a channel selection, the Swin shift mask against a literal emulation of the Python slices, the
 * relative-position index against Microsoft's meshgrid construction and the bias gather, patch merging against
 * direct indexing, patchify + linear against vt_conv2d (forward and gradients), finite-difference gradients of every
 * op, and builder errors. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gradcheck.h"
#include "vitc/ops.h"

/* A one-input graph: x (param, filled with distinct values) -> build(x) -> output copied to out (numel returned). */
typedef vt_tensor *(*unary_build)(vt_graph *g, vt_tensor *x, const int *a);

static int64_t run_unary(int ndim, const int *shape, unary_build f, const int *a, float *out, int64_t cap,
                         const float *xin, vt_err *err) {
    vt_err e = {0};
    vt_params *P = vt_params_new(&e);
    vt_graph *g = vt_graph_new(P, 0, &e);
    vt_tensor *x = vt_param(g, "x", ndim, shape, (vt_init){VT_INIT_ZERO, 0});
    vt_tensor *y = f(g, x, a);
    vt_graph_output(g, y);
    int64_t n = -1;
    if (vt_graph_finalize(g, &e) == 0 && y->numel <= cap) {
        for (int64_t i = 0; i < x->numel; i++) x->data[i] = xin ? xin[i] : (float)i + 1.0f;
        if (!y->view_of) /* planned memory is reused in real graphs: every output element must be written */
            for (int64_t i = 0; i < y->numel; i++) y->data[i] = NAN;
        vt_graph_forward(g);
        memcpy(out, y->data, sizeof(float) * (size_t)y->numel);
        n = y->numel;
    } else if (err) {
        *err = e;
    }
    vt_graph_free(g);
    vt_params_free(P);
    return n;
}

/* ---- window partition / reverse ---- */

typedef struct {
    const char *name;
    int B, H, W, C, wh, ww, sh, sw;
} wcase;

static int up(int n, int w) { return (n + w - 1) / w * w; }

/* torchvision: F.pad to (Hp, Wp), torch.roll(shifts=(−sh, −sw)), view (B, Hp/wh, wh, Wp/ww, ww, C),
 * permute (0, 1, 3, 2, 4, 5), reshape (B·nW, wh·ww, C). */
static void naive_partition(const wcase *c, const float *x, float *out) {
    const int Hp = up(c->H, c->wh), Wp = up(c->W, c->ww), nh = Hp / c->wh, nw = Wp / c->ww, C = c->C;
    float *pad = calloc((size_t)c->B * Hp * Wp * C, sizeof(float)), *rol = malloc(sizeof(float) * c->B * Hp * Wp * C);
    for (int b = 0; b < c->B; b++)
        for (int y = 0; y < c->H; y++)
            for (int xx = 0; xx < c->W; xx++)
                for (int ch = 0; ch < C; ch++)
                    pad[(((size_t)b * Hp + y) * Wp + xx) * C + ch] = x[(((size_t)b * c->H + y) * c->W + xx) * C + ch];
    for (int b = 0; b < c->B; b++) /* roll by −s: out[i] = in[(i + s) mod n] */
        for (int y = 0; y < Hp; y++)
            for (int xx = 0; xx < Wp; xx++)
                for (int ch = 0; ch < C; ch++)
                    rol[(((size_t)b * Hp + y) * Wp + xx) * C + ch] =
                        pad[(((size_t)b * Hp + (y + c->sh) % Hp) * Wp + (xx + c->sw) % Wp) * C + ch];
    size_t o = 0; /* the permuted 6-D view, read in its (contiguous) output order */
    for (int b = 0; b < c->B; b++)
        for (int i1 = 0; i1 < nh; i1++)
            for (int i3 = 0; i3 < nw; i3++)
                for (int i2 = 0; i2 < c->wh; i2++)
                    for (int i4 = 0; i4 < c->ww; i4++)
                        for (int ch = 0; ch < C; ch++)
                            out[o++] = rol[(((size_t)b * Hp + i1 * c->wh + i2) * Wp + i3 * c->ww + i4) * C + ch];
    free(pad);
    free(rol);
}

/* torchvision's reverse: view (B, nh, nw, wh, ww, C), permute (0, 1, 3, 2, 4, 5) to (B, Hp, Wp, C), roll by
 * (+sh, +sw) (out[i] = in[(i − s) mod n]), crop to H×W. */
static void naive_reverse(const wcase *c, const float *xw, float *out) {
    const int Hp = up(c->H, c->wh), Wp = up(c->W, c->ww), nh = Hp / c->wh, nw = Wp / c->ww, C = c->C;
    float *m = malloc(sizeof(float) * c->B * Hp * Wp * C);
    size_t o = 0;
    for (int b = 0; b < c->B; b++)
        for (int i1 = 0; i1 < nh; i1++)
            for (int i3 = 0; i3 < nw; i3++)
                for (int i2 = 0; i2 < c->wh; i2++)
                    for (int i4 = 0; i4 < c->ww; i4++)
                        for (int ch = 0; ch < C; ch++)
                            m[(((size_t)b * Hp + i1 * c->wh + i2) * Wp + i3 * c->ww + i4) * C + ch] = xw[o++];
    for (int b = 0; b < c->B; b++)
        for (int y = 0; y < c->H; y++)
            for (int xx = 0; xx < c->W; xx++)
                for (int ch = 0; ch < C; ch++)
                    out[(((size_t)b * c->H + y) * c->W + xx) * C + ch] =
                        m[(((size_t)b * Hp + (y - c->sh + Hp) % Hp) * Wp + (xx - c->sw + Wp) % Wp) * C + ch];
    free(m);
}

static vt_tensor *u_part(vt_graph *g, vt_tensor *x, const int *a) {
    return vt_window_partition(g, x, a[0], a[1], a[2], a[3]);
}
static vt_tensor *u_rev(vt_graph *g, vt_tensor *x, const int *a) {
    return vt_window_reverse(g, x, a[4], a[5], a[0], a[1], a[2], a[3]);
}
static vt_tensor *u_part_rev(vt_graph *g, vt_tensor *x, const int *a) {
    return vt_window_reverse(g, vt_window_partition(g, x, a[0], a[1], a[2], a[3]), a[4], a[5], a[0], a[1], a[2], a[3]);
}
static vt_tensor *u_rev_part(vt_graph *g, vt_tensor *x, const int *a) {
    return vt_window_partition(g, vt_window_reverse(g, x, a[4], a[5], a[0], a[1], a[2], a[3]), a[0], a[1], a[2], a[3]);
}

static const wcase wcases[] = {
    {"square_shift", 2, 8, 8, 3, 4, 4, 2, 2},       /* Swin: no padding */
    {"padded_shift", 2, 7, 9, 3, 3, 4, 1, 2},       /* odd sizes: padded to 9×12, shifted */
    {"padded_noshift", 1, 5, 6, 2, 4, 4, 0, 0},     /* torchvision's padding alone */
    {"window_larger", 1, 3, 2, 2, 5, 4, 0, 0},      /* the whole map in one padded window */
    {"stripe_col", 2, 6, 5, 4, 6, 1, 0, 0},         /* CSwin (H, 1) stripes */
    {"stripe_row", 1, 6, 5, 3, 2, 5, 0, 0},         /* CSwin (2, W) stripes */
    {"rect_shift_pad", 3, 5, 7, 2, 2, 3, 1, 2},     /* rectangular, shifted, padded on both axes */
    {"shift_past_pad", 1, 7, 7, 1, 4, 4, 3, 5},     /* shift larger than the padding */
    {"n1", 2, 1, 1, 5, 1, 1, 0, 0},
};

static void check_windows(vt_test *T) {
    enum { CAP = 4096 };
    static float xin[CAP], got[CAP], want[CAP], tmp[CAP];
    for (size_t k = 0; k < sizeof wcases / sizeof wcases[0]; k++) {
        const wcase *c = &wcases[k];
        const int Hp = up(c->H, c->wh), Wp = up(c->W, c->ww), nW = Hp / c->wh * (Wp / c->ww);
        const int a[6] = {c->wh, c->ww, c->sh, c->sw, c->H, c->W}, xs[4] = {c->B, c->H, c->W, c->C};
        const int ws[3] = {c->B * nW, c->wh * c->ww, c->C};
        const int64_t nx = (int64_t)c->B * c->H * c->W * c->C, nw = (int64_t)ws[0] * ws[1] * ws[2];
        for (int64_t i = 0; i < nx; i++) xin[i] = (float)i + 1.0f;
        vt_err e = {0};
        int64_t n = run_unary(4, xs, u_part, a, got, CAP, NULL, &e);
        naive_partition(c, xin, want);
        T_CHECK(T, n == nw && memcmp(got, want, sizeof(float) * (size_t)nw) == 0,
                "window_partition %s: differs from pad + roll + view/permute (%s)", c->name, e.msg);
        for (int64_t i = 0; i < nw; i++) tmp[i] = (float)(i % 97) - 40.0f;
        n = run_unary(3, ws, u_rev, a, got, CAP, tmp, &e);
        naive_reverse(c, tmp, want);
        T_CHECK(T, n == nx && memcmp(got, want, sizeof(float) * (size_t)nx) == 0,
                "window_reverse %s: differs from view/permute + roll + crop (%s)", c->name, e.msg);
        n = run_unary(4, xs, u_part_rev, a, got, CAP, NULL, &e);
        T_CHECK(T, n == nx && memcmp(got, xin, sizeof(float) * (size_t)nx) == 0,
                "window_reverse(window_partition(x)) != x for %s", c->name);
        if (Hp == c->H && Wp == c->W) {
            n = run_unary(3, ws, u_rev_part, a, got, CAP, tmp, &e);
            T_CHECK(T, n == nw && memcmp(got, tmp, sizeof(float) * (size_t)nw) == 0,
                    "window_partition(window_reverse(w)) != w for %s (no padding)", c->name);
        }
    }
}

/* vt_window_partition_sel against the full partition (naive_partition) with the selected channels picked out per
 * token: the first `width` of each of `blocks` channel blocks (CSwin's vertical branch takes the q, k, v halves). */
static vt_tensor *u_part_sel(vt_graph *g, vt_tensor *x, const int *a) {
    return vt_window_partition_sel(g, x, a[0], a[1], a[2], a[3], a[4], a[5]);
}

static void check_partition_sel(vt_test *T) {
    static const struct {
        wcase c;
        int blocks, width;
    } S[] = {
        {{"cswin_qkv_halves", 2, 6, 4, 12, 6, 2, 0, 0}, 3, 2}, /* (H, 2) stripes of a packed qkv, C = 4 */
        {{"padded_shift", 2, 7, 9, 6, 3, 4, 1, 2}, 2, 1},
        {{"one_block_prefix", 1, 5, 6, 5, 4, 4, 0, 0}, 1, 3},
        {{"all_channels", 1, 4, 4, 6, 2, 2, 1, 1}, 3, 2}, /* width = C/blocks: the plain partition */
    };
    enum { CAP = 8192 };
    static float got[CAP], full[CAP];
    for (size_t k = 0; k < sizeof S / sizeof S[0]; k++) {
        const wcase *c = &S[k].c;
        const int bl = S[k].blocks, wd = S[k].width, bs = c->C / bl, Cw = bl * wd;
        const int a[6] = {c->wh, c->ww, c->sh, c->sw, bl, wd}, xs[4] = {c->B, c->H, c->W, c->C};
        const int64_t ntok = (int64_t)c->B * up(c->H, c->wh) * up(c->W, c->ww);
        float *xin = malloc(sizeof(float) * (size_t)c->B * c->H * c->W * c->C);
        for (int64_t i = 0; i < (int64_t)c->B * c->H * c->W * c->C; i++) xin[i] = (float)i + 1.0f;
        vt_err e = {0};
        const int64_t n = run_unary(4, xs, u_part_sel, a, got, CAP, NULL, &e);
        naive_partition(c, xin, full);
        int ok = n == ntok * Cw;
        for (int64_t t = 0; ok && t < ntok; t++)
            for (int j = 0; j < Cw; j++) ok &= got[t * Cw + j] == full[t * c->C + j / wd * bs + j % wd];
        T_CHECK(T, ok, "window_partition_sel %s (%d blocks, width %d): differs from the partition's channels (%s)",
                c->name, bl, wd, e.msg);
        free(xin);
    }
}

/* ---- Swin shift mask ---- */

/* Python's a[start:stop] bounds on an axis of n (stop_none: stop is None). */
static void py_slice(int start, int stop, int stop_none, int n, int *lo, int *hi) {
    *lo = start < 0 ? (start + n < 0 ? 0 : start + n) : (start > n ? n : start);
    *hi = stop_none ? n : (stop < 0 ? (stop + n < 0 ? 0 : stop + n) : (stop > n ? n : stop));
}

/* Literally Microsoft's code: img_mask[:, h, w, :] = cnt over the slice pairs, window_partition, mask_windows
 * differences != 0 -> −100. */
static void naive_mask(int Hp, int Wp, int wh, int ww, int sh, int sw, float *out) {
    int *img = calloc((size_t)Hp * Wp, sizeof(int)), cnt = 0;
    const int hs[3][3] = {{0, -wh, 0}, {-wh, -sh, 0}, {-sh, 0, 1}}; /* (start, stop, stop is None) */
    const int wsl[3][3] = {{0, -ww, 0}, {-ww, -sw, 0}, {-sw, 0, 1}};
    for (int a = 0; a < 3; a++)
        for (int b = 0; b < 3; b++) {
            int y0, y1, x0, x1;
            py_slice(hs[a][0], hs[a][1], hs[a][2], Hp, &y0, &y1);
            py_slice(wsl[b][0], wsl[b][1], wsl[b][2], Wp, &x0, &x1);
            for (int y = y0; y < y1; y++)
                for (int x = x0; x < x1; x++) img[y * Wp + x] = cnt;
            cnt++;
        }
    const int N = wh * ww, nw = Wp / ww, nW = Hp / wh * nw;
    for (int w = 0; w < nW; w++)
        for (int i = 0; i < N; i++)
            for (int j = 0; j < N; j++) {
                const int yi = w / nw * wh + i / ww, xi = w % nw * ww + i % ww;
                const int yj = w / nw * wh + j / ww, xj = w % nw * ww + j % ww;
                out[((size_t)w * N + i) * N + j] = img[yi * Wp + xi] - img[yj * Wp + xj] != 0 ? -100.0f : 0.0f;
            }
    free(img);
}

static vt_tensor *u_mask_op(vt_graph *g, vt_tensor *x, const int *a) {
    (void)x;
    return vt_window_shift_mask(g, a[0], a[1], a[2], a[3], a[4], a[5]);
}

static void check_shift_mask(vt_test *T) {
    static const int M[][6] = {
        {8, 8, 4, 4, 2, 2}, {14, 21, 7, 7, 3, 3}, {6, 8, 3, 4, 1, 2}, {12, 12, 6, 4, 0, 2}, /* torchvision: sh = 0 */
        {8, 8, 4, 4, 0, 0}, {7, 7, 7, 7, 3, 3}, {4, 6, 2, 3, 3, 1},                          /* shift > window */
    };
    enum { CAP = 20000 };
    static float got[CAP], want[CAP];
    for (size_t k = 0; k < sizeof M / sizeof M[0]; k++) {
        const int *m = M[k], N = m[2] * m[3], n = m[0] / m[2] * (m[1] / m[3]) * N * N;
        const int rc = vt_window_shift_mask_fill(got, m[0], m[1], m[2], m[3], m[4], m[5]);
        naive_mask(m[0], m[1], m[2], m[3], m[4], m[5], want);
        T_CHECK(T, rc == 0 && memcmp(got, want, sizeof(float) * (size_t)n) == 0,
                "shift mask %dx%d window %dx%d shift (%d, %d) differs from the Python construction", m[0], m[1], m[2],
                m[3], m[4], m[5]);
        const int one[1] = {1};
        const int64_t no = run_unary(1, one, u_mask_op, m, got, CAP, NULL, NULL);
        T_CHECK(T, no == n && memcmp(got, want, sizeof(float) * (size_t)n) == 0, "vt_window_shift_mask op %zu", k);
    }
    /* known values: 8×8, window 4, shift 2: window 0 sees one region; window 3 four regions of 2×2 tokens */
    vt_window_shift_mask_fill(got, 8, 8, 4, 4, 2, 2);
    int z0 = 0, z3 = 0;
    for (int i = 0; i < 256; i++) z0 += got[i] == 0.0f, z3 += got[3 * 256 + i] == 0.0f;
    T_CHECK(T, z0 == 256 && z3 == 64 && got[3 * 256 + 2] == -100.0f && got[3 * 256 + 1] == 0.0f,
            "shift mask known values: %d and %d zeros", z0, z3);
    T_CHECK(T, vt_window_shift_mask_fill(got, 8, 9, 4, 4, 2, 2) == -1 &&
                   vt_window_shift_mask_fill(got, 8, 8, 4, 4, -1, 0) == -1,
            "invalid mask arguments are refused");
}

/* ---- relative position bias ---- */

/* Microsoft: coords = stack(meshgrid(arange(wh), arange(ww))) flattened; rel = coords[:, :, None] −
 * coords[:, None, :]; rel[0] += wh − 1; rel[1] += ww − 1; rel[0] *= 2ww − 1; index = rel.sum(0). */
static void naive_index(int wh, int ww, float *out) {
    const int N = wh * ww;
    int *cy = malloc(sizeof(int) * N), *cx = malloc(sizeof(int) * N);
    for (int y = 0; y < wh; y++)
        for (int x = 0; x < ww; x++) cy[y * ww + x] = y, cx[y * ww + x] = x;
    for (int i = 0; i < N; i++)
        for (int j = 0; j < N; j++) {
            int r0 = cy[i] - cy[j], r1 = cx[i] - cx[j];
            r0 += wh - 1;
            r1 += ww - 1;
            r0 *= 2 * ww - 1;
            out[i * N + j] = (float)(r0 + r1);
        }
    free(cy);
    free(cx);
}

static vt_tensor *u_rpb(vt_graph *g, vt_tensor *x, const int *a) { return vt_rel_pos_bias(g, x, a[0], a[1]); }

static void check_rel_pos(vt_test *T) {
    static const int S[][3] = {{7, 7, 3}, {2, 3, 2}, {1, 1, 1}, {3, 1, 4}, {4, 5, 1}};
    enum { CAP = 20000 };
    static float got[CAP], want[CAP], tab[CAP];
    for (size_t k = 0; k < sizeof S / sizeof S[0]; k++) {
        const int wh = S[k][0], ww = S[k][1], H = S[k][2], N = wh * ww, Tn = (2 * wh - 1) * (2 * ww - 1);
        vt_rel_pos_index_fill(got, wh, ww);
        naive_index(wh, ww, want);
        T_CHECK(T, memcmp(got, want, sizeof(float) * (size_t)N * N) == 0, "relative index %dx%d", wh, ww);
        for (int i = 0; i < Tn * H; i++) tab[i] = (float)i * 0.5f - 3.0f;
        const int ts[2] = {Tn, H};
        const int64_t n = run_unary(2, ts, u_rpb, S[k], got, CAP, tab, NULL);
        int ok = n == (int64_t)H * N * N;
        for (int h = 0; ok && h < H; h++)
            for (int i = 0; i < N * N; i++) ok &= got[(size_t)h * N * N + i] == tab[(size_t)want[i] * H + h];
        T_CHECK(T, ok, "rel_pos_bias %dx%d, %d heads: bias[h, i, j] != table[index(i, j), h]", wh, ww, H);
    }
}

/* ---- patch merge ---- */

static vt_tensor *u_pm(vt_graph *g, vt_tensor *x, const int *a) {
    (void)a;
    return vt_patch_merge(g, x);
}

static void check_patch_merge(vt_test *T) {
    static const int S[][4] = {{2, 4, 6, 3}, {1, 5, 3, 2}, {2, 1, 1, 4}, {1, 2, 7, 1}};
    enum { CAP = 4096 };
    static float got[CAP];
    for (size_t k = 0; k < sizeof S / sizeof S[0]; k++) {
        const int B = S[k][0], H = S[k][1], W = S[k][2], C = S[k][3], Ho = (H + 1) / 2, Wo = (W + 1) / 2;
        const int64_t n = run_unary(4, S[k], u_pm, NULL, got, CAP, NULL, NULL);
        int ok = n == (int64_t)B * Ho * Wo * 4 * C;
        /* torchvision: x0 = x[0::2, 0::2], x1 = x[1::2, 0::2], x2 = x[0::2, 1::2], x3 = x[1::2, 1::2] after F.pad */
        const int dy[4] = {0, 1, 0, 1}, dx[4] = {0, 0, 1, 1};
        for (int b = 0; ok && b < B; b++)
            for (int oy = 0; oy < Ho; oy++)
                for (int ox = 0; ox < Wo; ox++)
                    for (int q = 0; q < 4; q++)
                        for (int c = 0; c < C; c++) {
                            const int y = 2 * oy + dy[q], x = 2 * ox + dx[q];
                            const float w = y < H && x < W ? (float)(((b * H + y) * W + x) * C + c) + 1.0f : 0.0f;
                            ok &= got[(((size_t)b * Ho + oy) * Wo + ox) * 4 * C + (size_t)q * C + c] == w;
                        }
        T_CHECK(T, ok, "patch_merge (%d, %d, %d, %d) differs from torchvision's strided slices", B, H, W, C);
    }
}

/* ---- patchify + linear vs conv2d (stride = kernel = p) ---- */

static void run_patch_embed(int use_conv, int B, int H, int W, int C, int Co, int p, float *out, float *grads) {
    vt_err e = {0};
    vt_params *P = vt_params_new(&e);
    vt_graph *g = vt_graph_new(P, 1, &e);
    const int xs[4] = {B, H, W, C}, wsh[4] = {Co, C, p, p}, bs[1] = {Co}, w2[2] = {Co, C * p * p};
    vt_tensor *x = vt_param(g, "x", 4, xs, (vt_init){VT_INIT_NORMAL, 1.0f});
    vt_tensor *w = vt_param(g, "w", 4, wsh, (vt_init){VT_INIT_NORMAL, 0.5f});
    vt_tensor *b = vt_param(g, "b", 1, bs, (vt_init){VT_INIT_NORMAL, 0.5f});
    const int Ho = H / p, Wo = W / p, ys[3] = {B, Ho * Wo, Co};
    vt_tensor *y;
    if (use_conv) {
        const int to_nchw[4] = {0, 3, 1, 2}, to_nhwc[4] = {0, 2, 3, 1};
        y = vt_conv2d(g, vt_permute(g, x, to_nchw), w, b, p, 0, 1);
        y = vt_reshape(g, vt_permute(g, y, to_nhwc), 3, ys);
    } else {
        y = vt_linear(g, vt_patchify_nhwc(g, x, p), vt_reshape(g, w, 2, w2), b);
    }
    vt_tensor *r = vt_input(g, "r", 3, ys);
    /* + sum(x): x's gradient also has a second term, to which the patch gather's adjoint must add */
    vt_graph_set_loss(g, vt_add(g, vt_sum(g, vt_mul(g, y, r)), vt_sum(g, x)));
    vt_graph_output(g, y);
    if (vt_graph_finalize(g, &e) == 0) {
        vt_params_init(P, 3);
        for (int64_t i = 0; i < r->numel; i++) r->data[i] = (float)((i * 7919) % 13) / 13.0f - 0.5f;
        vt_graph_forward(g);
        memcpy(out, y->data, sizeof(float) * (size_t)y->numel);
        vt_params_zero_grad(P);
        vt_graph_backward(g);
        memcpy(grads, x->grad, sizeof(float) * (size_t)x->numel);
        memcpy(grads + x->numel, w->grad, sizeof(float) * (size_t)w->numel);
        memcpy(grads + x->numel + w->numel, b->grad, sizeof(float) * (size_t)b->numel);
    } else {
        memset(out, 0, sizeof(float) * (size_t)B * Ho * Wo * Co);
        fprintf(stderr, "patch embed build: %s\n", e.msg);
    }
    vt_graph_free(g);
    vt_params_free(P);
}

static void check_patchify_conv(vt_test *T) {
    static const int S[][6] = {{2, 8, 12, 3, 5, 4}, {1, 6, 9, 4, 3, 3}, {2, 3, 5, 2, 4, 1}, {1, 4, 4, 8, 2, 2},
                               {1, 16, 8, 16, 3, 8},  /* p and C multiples of 8: register transposes */
                               {1, 8, 16, 12, 2, 8}}; /* p = 8, C not a multiple of 8 */
    enum { CAP = 8192 };
    static float o1[CAP], o2[CAP], g1[CAP], g2[CAP];
    for (size_t k = 0; k < sizeof S / sizeof S[0]; k++) {
        const int B = S[k][0], H = S[k][1], W = S[k][2], C = S[k][3], Co = S[k][4], p = S[k][5];
        const size_t no = (size_t)B * (H / p) * (W / p) * Co, ng = (size_t)B * H * W * C + (size_t)Co * C * p * p + Co;
        run_patch_embed(0, B, H, W, C, Co, p, o1, g1);
        run_patch_embed(1, B, H, W, C, Co, p, o2, g2);
        /* errors relative to the output's and the gradients' scale (at least 1): an output sums C·p² = 1024
         * products at p = 8, where the two GEMM paths' float32 rounding alone differs by ~1e-5 (Intel Ice Lake) */
        double eo = 0, eg = 0, so = 1, sg = 1;
        for (size_t i = 0; i < no; i++) eo = t_worse(eo, fabs(o1[i] - o2[i])), so = fmax(so, fabs(o2[i]));
        for (size_t i = 0; i < ng; i++) eg = t_worse(eg, fabs(g1[i] - g2[i])), sg = fmax(sg, fabs(g2[i]));
        T_CHECK(T, eo / so < 1e-5 && eg / sg < 1e-4, "patchify+linear vs conv2d (%d, %d, %d, %d) p=%d: output err %g "
                "of %g, grad err %g of %g", B, H, W, C, p, eo, so, eg, sg);
    }
}

/* ---- finite differences ---- */

static vt_tensor *b_part(vt_graph *g, vt_tensor **x, const gc_case *c) {
    return vt_window_partition(g, x[0], c->ia[0], c->ia[1], c->ia[2], c->ia[3]);
}
static vt_tensor *b_part_sel(vt_graph *g, vt_tensor **x, const gc_case *c) {
    return vt_window_partition_sel(g, x[0], c->ia[0], c->ia[1], c->ia[2], c->ia[3], c->ia[4], c->ia[5]);
}
static vt_tensor *b_rev(vt_graph *g, vt_tensor **x, const gc_case *c) {
    return vt_window_reverse(g, x[0], c->ia[4], c->ia[5], c->ia[0], c->ia[1], c->ia[2], c->ia[3]);
}
static vt_tensor *b_rev_add(vt_graph *g, vt_tensor **x, const gc_case *c) {
    return vt_window_reverse_add(g, x[0], x[1], c->ia[4], c->ia[5], c->ia[0], c->ia[1], c->ia[2], c->ia[3]);
}
static vt_tensor *b_rev_cat(vt_graph *g, vt_tensor **x, const gc_case *c) {
    return vt_window_reverse_cat(g, x[0], x[1], c->ia[4], c->ia[5], c->ia[0], c->ia[1], c->ia[2], c->ia[3]);
}
static vt_tensor *b_rpb(vt_graph *g, vt_tensor **x, const gc_case *c) {
    return vt_rel_pos_bias(g, x[0], c->ia[0], c->ia[1]);
}
static vt_tensor *b_pm(vt_graph *g, vt_tensor **x, const gc_case *c) {
    (void)c;
    return vt_patch_merge(g, x[0]);
}
static vt_tensor *b_pf(vt_graph *g, vt_tensor **x, const gc_case *c) { return vt_patchify_nhwc(g, x[0], c->ia[0]); }
/* the bias gather feeding softmax, so the sum over pairs of one offset matters */
static vt_tensor *b_rpb_soft(vt_graph *g, vt_tensor **x, const gc_case *c) {
    return vt_softmax(g, vt_rel_pos_bias(g, x[0], c->ia[0], c->ia[1]), -1);
}

static const gc_case fd_cases[] = {
    {.name = "window_partition_shift_pad", .nx = 1, .ndim = {4}, .shape = {{2, 5, 7, 3}}, .build = b_part,
     .ia = {2, 3, 1, 2}},
    {.name = "window_partition_stripe", .nx = 1, .ndim = {4}, .shape = {{1, 4, 3, 2}}, .build = b_part, .ia = {4, 1}},
    /* a channel selection: the unselected channels' gradients stay zero */
    {.name = "window_partition_sel_stripe", .nx = 1, .ndim = {4}, .shape = {{2, 4, 2, 6}}, .build = b_part_sel,
     .ia = {4, 1, 0, 0, 3, 1}},
    {.name = "window_partition_sel_shift_pad", .nx = 1, .ndim = {4}, .shape = {{1, 3, 5, 4}}, .build = b_part_sel,
     .ia = {2, 2, 1, 1, 2, 1}},
    {.name = "window_partition_n1", .nx = 1, .ndim = {4}, .shape = {{3, 1, 1, 2}}, .build = b_part, .ia = {1, 1}},
    {.name = "window_reverse_shift_pad", .nx = 1, .ndim = {3}, .shape = {{2 * 9, 6, 3}}, .build = b_rev,
     .ia = {2, 3, 1, 2, 5, 7}},
    {.name = "window_reverse_stripe", .nx = 1, .ndim = {3}, .shape = {{2, 5, 2}}, .build = b_rev,
     .ia = {1, 5, 0, 0, 2, 5}},
    /* the residual (B, H·W, C) added in the same gather: both inputs' gradients */
    {.name = "window_reverse_add_shift_pad", .nx = 2, .ndim = {3, 3}, .shape = {{2 * 9, 6, 3}, {2, 35, 3}},
     .build = b_rev_add, .ia = {2, 3, 1, 2, 5, 7}},
    /* channels appended after the map's (B, H·W, C'): both inputs' gradients */
    {.name = "window_reverse_cat_shift_pad", .nx = 2, .ndim = {3, 3}, .shape = {{2 * 9, 6, 3}, {2, 35, 2}},
     .build = b_rev_cat, .ia = {2, 3, 1, 2, 5, 7}},
    {.name = "window_reverse_cat_stripe", .nx = 2, .ndim = {3, 4}, .shape = {{2 * 2, 4, 2}, {2, 4, 2, 3}},
     .build = b_rev_cat, .ia = {4, 1, 0, 0, 4, 2}},
    {.name = "rel_pos_bias", .nx = 1, .ndim = {2}, .shape = {{3 * 5, 2}}, .build = b_rpb, .ia = {2, 3}},
    {.name = "rel_pos_bias_softmax", .nx = 1, .ndim = {2}, .shape = {{5 * 3, 3}}, .build = b_rpb_soft, .ia = {3, 2}},
    {.name = "rel_pos_bias_1x1", .nx = 1, .ndim = {2}, .shape = {{1, 4}}, .build = b_rpb, .ia = {1, 1}},
    {.name = "patch_merge_odd", .nx = 1, .ndim = {4}, .shape = {{2, 3, 5, 2}}, .build = b_pm},
    {.name = "patch_merge_even", .nx = 1, .ndim = {4}, .shape = {{1, 4, 2, 3}}, .build = b_pm},
    {.name = "patch_merge_1x1", .nx = 1, .ndim = {4}, .shape = {{2, 1, 1, 3}}, .build = b_pm},
    {.name = "patchify_p2", .nx = 1, .ndim = {4}, .shape = {{2, 4, 6, 3}}, .build = b_pf, .ia = {2}},
    {.name = "patchify_p3_nonsquare", .nx = 1, .ndim = {4}, .shape = {{1, 3, 9, 2}}, .build = b_pf, .ia = {3}},
    {.name = "patchify_p4", .nx = 1, .ndim = {4}, .shape = {{1, 4, 8, 3}}, .build = b_pf, .ia = {4}},
    {.name = "patchify_p1", .nx = 1, .ndim = {4}, .shape = {{1, 2, 3, 2}}, .build = b_pf, .ia = {1}},
    {.name = "patchify_p8_c8", .nx = 1, .ndim = {4}, .shape = {{1, 8, 16, 8}}, .build = b_pf, .ia = {8}},
};

/* ---- builder errors ---- */

static vt_tensor *e_part(vt_graph *g, vt_tensor *x, const int *a) {
    return vt_window_partition(g, x, a[0], a[1], a[2], a[3]);
}

static void check_errors(vt_test *T) {
    struct {
        const char *want;
        int nd, shape[4];
        unary_build f;
        int a[6];
    } E[] = {
        {"window_partition", 3, {2, 4, 4}, e_part, {2, 2, 0, 0}},          /* not 4-D */
        {"shift", 4, {1, 4, 4, 2}, e_part, {2, 2, 4, 0}},                  /* shift past the padded map */
        {"at least", 4, {1, 4, 4, 2}, e_part, {0, 2, 0, 0}},               /* empty window */
        {"blocks", 4, {1, 4, 4, 6}, u_part_sel, {2, 2, 0, 0, 3, 3}},      /* width 3 > 6 / 3 */
        {"blocks", 4, {1, 4, 4, 6}, u_part_sel, {2, 2, 0, 0, 4, 1}},      /* 6 channels in 4 blocks */
        {"window_reverse", 3, {3, 4, 2}, u_rev, {2, 2, 0, 0, 4, 4}},       /* 3 windows, 4 per image */
        {"rel_pos_bias", 2, {10, 2}, u_rpb, {2, 3}},                       /* table rows 10 ≠ 15 */
        {"patch_merge", 3, {1, 4, 4}, u_pm, {0}},                          /* not 4-D */
        {"window_shift_mask", 1, {1}, u_mask_op, {8, 8, 3, 4, 0, 0}},      /* 8 not a multiple of 3 */
    };
    for (size_t i = 0; i < sizeof E / sizeof E[0]; i++) {
        vt_err e = {0};
        float dummy[1];
        const int64_t n = run_unary(E[i].nd, E[i].shape, E[i].f, E[i].a, dummy, 0, NULL, &e);
        T_CHECK(T, n < 0 && strstr(e.msg, E[i].want) && strstr(e.msg, "("), "error case %zu: got '%s'", i, e.msg);
    }
    vt_err e = {0};
    vt_params *P = vt_params_new(&e);
    vt_graph *g = vt_graph_new(P, 0, &e);
    const int xs[4] = {1, 6, 5, 2};
    vt_tensor *y = vt_patchify_nhwc(g, vt_input(g, "x", 4, xs), 2);
    T_CHECK(T, !y && strstr(g->err.msg, "patchify_nhwc") && strstr(g->err.msg, "(1, 6, 5, 2)"), "patchify error: '%s'",
            g->err.msg);
    vt_graph_free(g);
    vt_params_free(P);
}

/* Finalizes g with outputs y1 (a fused op) and y2 (its chain), fills a and b (the inputs) with fixed values, runs the
 * forward: 1 when both outputs are equal bit for bit, 0 otherwise (or when g cannot be built, e set). */
static int fused_equals_chain(vt_graph *g, vt_tensor *y1, vt_tensor *y2, vt_tensor *a, vt_tensor *b, vt_err *e) {
    if (!y1 || !y2) return 0;
    vt_graph_output(g, y1);
    vt_graph_output(g, y2);
    if (vt_graph_finalize(g, e) != 0) return 0;
    for (int64_t i = 0; i < a->numel; i++) a->data[i] = (float)(i % 23) * 0.37f - 3.0f;
    for (int64_t i = 0; i < b->numel; i++) b->data[i] = (float)(i % 11) * 0.53f - 2.0f;
    vt_graph_forward(g);
    return y1->numel == y2->numel && memcmp(y1->data, y2->data, sizeof(float) * (size_t)y1->numel) == 0;
}

/* vt_window_reverse_add against vt_window_reverse then vt_add in one graph (bit for bit: the same float sums), on a
 * padded and shifted map; a residual of the wrong size is refused with both shapes named. */
static void check_reverse_add(vt_test *T) {
    vt_err e = {0};
    vt_params *P = vt_params_new(&e);
    vt_graph *g = vt_graph_new(P, 0, &e);
    const int ws[3] = {2 * 9, 6, 3}, rs[3] = {2, 35, 3}, map[4] = {2, 5, 7, 3}, bad[3] = {2, 34, 3};
    vt_tensor *xw = vt_input(g, "xw", 3, ws), *r = vt_input(g, "r", 3, rs);
    vt_tensor *y1 = vt_window_reverse_add(g, xw, r, 5, 7, 2, 3, 1, 2);
    vt_tensor *y2 = vt_add(g, vt_window_reverse(g, xw, 5, 7, 2, 3, 1, 2), vt_reshape(g, r, 4, map));
    T_CHECK(T, fused_equals_chain(g, y1, y2, xw, r, &e), "window_reverse_add differs from window_reverse + add (%s)",
            e.msg);
    vt_graph_free(g);
    g = vt_graph_new(P, 0, &e);
    vt_tensor *y = vt_window_reverse_add(g, vt_input(g, "xw", 3, ws), vt_input(g, "r", 3, bad), 5, 7, 2, 3, 1, 2);
    T_CHECK(T, !y && strstr(g->err.msg, "added term (2, 34, 3)") && strstr(g->err.msg, "(2, 5, 7, 3)"),
            "window_reverse_add with a wrong residual: '%s'", g->err.msg);
    vt_graph_free(g);
    vt_params_free(P);
}

/* vt_window_reverse_cat against vt_window_reverse then vt_concat on the channels in one graph (bit for bit), on a
 * padded and shifted map (the gradients: the finite-difference cases); appended channels of the wrong size are
 * refused with both shapes named. */
static void check_reverse_cat(vt_test *T) {
    vt_err e = {0};
    vt_params *P = vt_params_new(&e);
    vt_graph *g = vt_graph_new(P, 0, &e);
    const int ws[3] = {2 * 9, 6, 3}, ts[4] = {2, 5, 7, 2}, bad[3] = {2, 34, 2};
    vt_tensor *xw = vt_input(g, "xw", 3, ws), *tl = vt_input(g, "t", 4, ts);
    vt_tensor *parts[2] = {vt_window_reverse(g, xw, 5, 7, 2, 3, 1, 2), tl};
    vt_tensor *y1 = vt_window_reverse_cat(g, xw, tl, 5, 7, 2, 3, 1, 2), *y2 = vt_concat(g, parts, 2, 3);
    T_CHECK(T, fused_equals_chain(g, y1, y2, xw, tl, &e),
            "window_reverse_cat differs from window_reverse + concat (%s)", e.msg);
    vt_graph_free(g);
    /* training graphs, loss Σ y·r: with one input a constant the other's gradient is the same as with both wanted */
    float *grads[3][2] = {{NULL}};
    for (int v = 0; v < 3; v++) { /* v 0: both parameters; 1: the windows an input; 2: the tail an input */
        vt_graph *gt = vt_graph_new(P, 1, &e);
        const int ys[4] = {2, 5, 7, 5};
        vt_tensor *a = v == 1 ? vt_input(gt, "xw", 3, ws) : vt_param(gt, "pxw", 3, ws, (vt_init){VT_INIT_NORMAL, 1.0f});
        vt_tensor *b = v == 2 ? vt_input(gt, "t", 4, ts) : vt_param(gt, "pt", 4, ts, (vt_init){VT_INIT_NORMAL, 1.0f});
        vt_tensor *r = vt_input(gt, "r", 4, ys);
        vt_graph_set_loss(gt, vt_sum(gt, vt_mul(gt, vt_window_reverse_cat(gt, a, b, 5, 7, 2, 3, 1, 2), r)));
        if (!gt->err.msg[0] && vt_graph_finalize(gt, &e) == 0) {
            for (int64_t i = 0; i < a->numel; i++) a->data[i] = (float)(i % 13) * 0.3f - 1.0f;
            for (int64_t i = 0; i < b->numel; i++) b->data[i] = (float)(i % 7) * 0.2f - 0.5f;
            for (int64_t i = 0; i < r->numel; i++) r->data[i] = (float)(i % 17) * 0.11f - 0.9f;
            vt_params_zero_grad(P);
            vt_graph_forward(gt);
            vt_graph_backward(gt);
            for (int k = 0; k < 2; k++) {
                const vt_tensor *s = k ? b : a;
                if (s->grad && (grads[v][k] = malloc(sizeof(float) * (size_t)s->numel)))
                    memcpy(grads[v][k], s->grad, sizeof(float) * (size_t)s->numel);
            }
        }
        T_CHECK(T, !gt->err.msg[0], "window_reverse_cat training graph %d: %s", v, gt->err.msg);
        vt_graph_free(gt);
    }
    const size_t nw = sizeof(float) * 2 * 9 * 6 * 3, nt = sizeof(float) * 2 * 5 * 7 * 2;
    T_CHECK(T, grads[0][0] && grads[0][1] && grads[2][0] && grads[1][1] && !memcmp(grads[0][0], grads[2][0], nw) &&
                   !memcmp(grads[0][1], grads[1][1], nt),
            "window_reverse_cat: one gradient wanted alone equals the same gradient wanted with the other");
    for (int v = 0; v < 3; v++) free(grads[v][0]), free(grads[v][1]);
    g = vt_graph_new(P, 0, &e);
    vt_tensor *y = vt_window_reverse_cat(g, vt_input(g, "xw", 3, ws), vt_input(g, "t", 3, bad), 5, 7, 2, 3, 1, 2);
    T_CHECK(T, !y && strstr(g->err.msg, "appended channels (2, 34, 2)") && strstr(g->err.msg, "(2, 5, 7, C')"),
            "window_reverse_cat with a wrong tail: '%s'", g->err.msg);
    vt_graph_free(g);
    vt_params_free(P);
}

void test_ops_window(vt_test *T) {
    check_windows(T);
    check_partition_sel(T);
    check_reverse_add(T);
    check_reverse_cat(T);
    check_shift_mask(T);
    check_rel_pos(T);
    check_patch_merge(T);
    check_patchify_conv(T);
    for (size_t i = 0; i < sizeof fd_cases / sizeof fd_cases[0]; i++) gc_run(T, &fd_cases[i]);
    check_errors(T);
}
