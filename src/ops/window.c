/* Gathers of the hierarchical hosts (Swin, CSwin, PVT): window partition (optionally of a channel selection) and
 * reverse with padding and cyclic shift (the reverse optionally adding a map-shaped term in the same pass, Swin's
 * residual), the Swin shift mask, the relative-position bias gather, Swin's patch merging and the non-overlapping
 * patch extraction of k = s convolutions on channels-last maps. All are data movement (0 MACs). Every output
 * element comes from at most one input element (and the addend's), so the backward kernels are adjoint gathers,
 * parallel over the same rows as the forward ones without races (the bias gather's backward sums over the pairs of
 * each relative offset).
 * Inner loops move runs of C contiguous channels (memcpy-sized); positions are stepped incrementally (no divisions
 * per element). */
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "vitc/ops.h"
#include "transpose8.h"

#define PAR_MIN 32768 /* elements below which the gathers stay single-threaded */

/* dst = or += src over n floats. */
static inline void move(float *restrict dst, const float *restrict src, size_t n, int acc) {
    if (acc)
        for (size_t i = 0; i < n; i++) dst[i] += src[i];
    else
        memcpy(dst, src, sizeof(float) * n);
}

/* dst = src + add over n floats (vt_window_reverse_add's map rows). */
static inline void move_add(float *restrict dst, const float *restrict src, const float *restrict add, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = src[i] + add[i];
}

/* ---- window partition / reverse ----
 * The map (B, H, W, C) is padded with zeros to (Hp, Wp) (multiples of the window), rolled by (−sh, −sw)
 * (padded-map position (Y, X) takes ((Y + sh) mod Hp, (X + sw) mod Wp)) and cut into nWh × nWw windows of wh × ww
 * tokens: window w = (b·nWh + wy)·nWw + wx, token ty·ww + tx ↔ rolled position (wy·wh + ty, wx·ww + tx). */

typedef struct {
    int B, H, W, C, wh, ww, sh, sw, Hp, Wp, nWh, nWw;
    int Cm, nb; /* the map's channels; the windows hold the first C/nb channels of each of its nb blocks of Cm/nb */
    int tail;   /* vt_window_reverse_cat: in[1] (B·H·W, Cm − C) fills each map token's last Cm − C channels */
} win_p;

/* The selected channels of one run of len tokens: nb blocks of bw = C/nb window channels, Cm/nb apart in the map;
 * with a tail (vt_window_reverse_cat, nb = 1) tr holds the run's last Cm − C map channels, moved in the same pass
 * (tacc: += into tr). */
static void move_sel(const win_p *p, float *mr, float *wr, float *tr, int len, int to_win, int acc, int tacc) {
    const size_t bw = (size_t)(p->C / p->nb), bs = (size_t)(p->Cm / p->nb), Ct = (size_t)(p->Cm - p->C);
    for (int t = 0; t < len; t++) {
        float *mt = mr + (size_t)t * p->Cm;
        if (tr) {
            float *w = wr + (size_t)t * p->C, *r = tr + (size_t)t * Ct;
            if (to_win) {
                move(w, mt, bw, acc);
                move(r, mt + bw, Ct, tacc);
            } else {
                memcpy(mt, w, sizeof(float) * bw);
                memcpy(mt + bw, r, sizeof(float) * Ct);
            }
            continue;
        }
        for (int k = 0; k < p->nb; k++) {
            float *m = mt + k * bs, *w = wr + (size_t)t * p->C + k * bw;
            if (to_win)
                move(w, m, bw, acc);
            else
                move(m, w, bw, acc);
        }
    }
}

/* Moves between the map side and the window side. to_win: windows receive (padding positions get zeros unless
 * acc); otherwise the map receives (padding positions are skipped), plus add (a map-shaped addend) when not NULL.
 * acc: += instead of =. A channel selection (Cm > C) is moved to the windows or added back to the map, never with
 * an addend; with p->tail, tail (B·H·W, Cm − C) moves with it: into the map, or receiving (tacc: +=). */
static void win_move(const win_p *p, float *map, float *win, const float *add, float *tail, int to_win, int acc,
                     int tacc) {
    const int wh = p->wh, ww = p->ww, H = p->H, W = p->W, Hp = p->Hp, Wp = p->Wp, nWh = p->nWh, nWw = p->nWw;
    const size_t C = (size_t)p->C, Cm = (size_t)p->Cm;
    const int64_t R = (int64_t)p->B * nWh * nWw * wh; /* one window row each */
#pragma omp parallel for schedule(static) if (R * ww * (int64_t)C > PAR_MIN)
    for (int64_t r = 0; r < R; r++) {
        const int64_t w = r / wh;
        const int ty = (int)(r % wh), wx = (int)(w % nWw), wy = (int)(w / nWw % nWh);
        const int64_t b = w / ((int64_t)nWw * nWh);
        float *wr = win + ((size_t)w * wh * ww + (size_t)ty * ww) * C;
        int Y = wy * wh + ty + p->sh;
        if (Y >= Hp) Y -= Hp;
        if (Y >= H) { /* a padding row */
            if (to_win && !acc) memset(wr, 0, sizeof(float) * (size_t)ww * C);
            continue;
        }
        float *mr = map + ((size_t)b * H + (size_t)Y) * W * Cm;
        for (int tx = 0; tx < ww;) {
            int X = wx * ww + tx + p->sw;
            if (X >= Wp) X -= Wp;
            /* a run of tokens that neither wraps nor crosses the data / padding edge */
            const int lim = X >= W ? Wp - X : W - X, len = ww - tx < lim ? ww - tx : lim;
            if (X < W) {
                if (Cm != C)
                    move_sel(p, mr + (size_t)X * Cm, wr + (size_t)tx * C,
                             tail ? tail + (((size_t)b * H + (size_t)Y) * W + (size_t)X) * (Cm - C) : NULL, len,
                             to_win, acc, tacc);
                else if (to_win)
                    move(wr + (size_t)tx * C, mr + (size_t)X * C, (size_t)len * C, acc);
                else if (add)
                    move_add(mr + (size_t)X * C, wr + (size_t)tx * C, add + (mr - map) + (size_t)X * C,
                             (size_t)len * C);
                else
                    move(mr + (size_t)X * C, wr + (size_t)tx * C, (size_t)len * C, acc);
            } else if (to_win && !acc) {
                memset(wr + (size_t)tx * C, 0, sizeof(float) * (size_t)len * C);
            }
            tx += len;
        }
    }
}

static void wpart_fwd(vt_node *n) { win_move(VT_OP_P(n, win_p), n->in[0]->data, n->out->data, NULL, NULL, 1, 0, 0); }
static void wpart_bwd(vt_node *n) { /* x's gradient written where it is fresh (grad_sets: no channel selection) */
    if (n->in[0]->grad)
        win_move(VT_OP_P(n, win_p), n->in[0]->grad, n->out->grad, NULL, NULL, 0, !(n->grad_fresh & 1u), 0);
}
/* in[1], when present: the addend of vt_window_reverse_add (its gradient: the output's, added), or the tail of
 * vt_window_reverse_cat (its gradient: the output's last channels) */
static void wrev_fwd(vt_node *n) {
    const win_p *p = VT_OP_P(n, win_p);
    float *r = n->nin > 1 ? n->in[1]->data : NULL;
    win_move(p, n->out->data, n->in[0]->data, p->tail ? NULL : r, p->tail ? r : NULL, 0, 0, 0);
}
static void wrev_bwd(vt_node *n) { /* fresh gradients (grad_sets: both slots) are written, padding tokens zeroed */
    const win_p *p = VT_OP_P(n, win_p);
    if (p->tail) { /* both gradients in one pass over the output's */
        float *gw = n->in[0]->grad, *gt = n->in[1]->grad;
        const float *dy = n->out->grad;
        if (gw) /* with the tail's (when wanted) in the same pass */
            win_move(p, n->out->grad, gw, NULL, gt, 1, !(n->grad_fresh & 1u), !(n->grad_fresh & 2u));
        const int64_t N = gw || !gt ? 0 : (int64_t)p->B * p->H * p->W; /* the tail's alone */
        const int Ct = p->Cm - p->C, tacc = !(n->grad_fresh & 2u);
#pragma omp parallel for schedule(static) if (N * Ct > PAR_MIN)
        for (int64_t i = 0; i < N; i++) move(gt + (size_t)i * Ct, dy + (size_t)i * p->Cm + p->C, (size_t)Ct, tacc);
        return;
    }
    if (n->in[0]->grad) win_move(p, n->out->grad, n->in[0]->grad, NULL, NULL, 1, !(n->grad_fresh & 1u), 0);
    if (n->nin > 1 && n->in[1]->grad) {
        float *rg = n->in[1]->grad;
        const float *dy = n->out->grad;
        const int64_t N = n->out->numel;
        if (n->grad_fresh & 2u) {
            memcpy(rg, dy, sizeof(float) * (size_t)N);
            return;
        }
#pragma omp parallel for schedule(static) if (N > PAR_MIN)
        for (int64_t i = 0; i < N; i++) rg[i] += dy[i];
    }
}

static const vt_opdef op_wpart = {"window_partition", wpart_fwd, wpart_bwd, VT_READS(0), NULL, VT_OP_OTHER};
static const vt_opdef op_wrev = {"window_reverse", wrev_fwd, wrev_bwd, VT_READS(0), NULL, VT_OP_OTHER};

/* Fills the geometry for a (B, H, W, C) map; returns 0, or -1 with the error recorded under `op`. */
static int win_geom(vt_graph *g, const char *op, const char *what, int B, int H, int W, int C, int wh, int ww, int sh,
                    int sw, win_p *p) {
    if (wh < 1 || ww < 1) {
        vt_fail(g, op, "%s: window %dx%d must be at least 1x1", what, wh, ww);
        return -1;
    }
    const int64_t Hp = ((int64_t)H + wh - 1) / wh * wh, Wp = ((int64_t)W + ww - 1) / ww * ww;
    if (Hp > INT_MAX || Wp > INT_MAX || (double)B * Hp * Wp * C > INT_MAX) { /* the windows' element count */
        vt_fail(g, op, "%s: %dx%d windows of a %dx%d map exceed the engine's sizes", what, wh, ww, H, W);
        return -1;
    }
    if (sh < 0 || sh >= Hp || sw < 0 || sw >= Wp) {
        vt_fail(g, op, "%s: shift (%d, %d) must lie in [0, %lld) x [0, %lld) (the %dx%d map padded to windows %dx%d)",
                what, sh, sw, (long long)Hp, (long long)Wp, H, W, wh, ww);
        return -1;
    }
    *p = (win_p){B, H, W, C, wh, ww, sh, sw, (int)Hp, (int)Wp, (int)(Hp / wh), (int)(Wp / ww), C, 1, 0};
    return 0;
}

vt_tensor *vt_window_partition(vt_graph *g, vt_tensor *x, int wh, int ww, int sh, int sw) {
    return vt_window_partition_sel(g, x, wh, ww, sh, sw, 1, 0);
}

vt_tensor *vt_window_partition_sel(vt_graph *g, vt_tensor *x, int wh, int ww, int sh, int sw, int blocks, int width) {
    if (vt_bad(g, 1, x)) return NULL;
    char sx[64], what[96];
    vt_shape_str(x, sx, 64);
    if (x->ndim != 4) return vt_fail(g, "window_partition", "input %s must be (B, H, W, C)", sx);
    const int Cm = x->shape[3];
    if (blocks >= 1 && Cm % blocks == 0 && width == 0) width = Cm / blocks;
    if (blocks < 1 || Cm % blocks || width < 1 || width > Cm / blocks)
        return vt_fail(g, "window_partition", "input %s: the first %d channels of %d blocks need 1 <= %d <= C/%d",
                       sx, width, blocks, width, blocks);
    snprintf(what, sizeof what, "input %s", sx);
    win_p p;
    if (win_geom(g, "window_partition", what, x->shape[0], x->shape[1], x->shape[2], blocks * width, wh, ww, sh, sw,
                 &p))
        return NULL;
    p.Cm = Cm;
    p.nb = blocks;
    const int shape[3] = {p.B * p.nWh * p.nWw, wh * ww, p.C};
    vt_node *n = vt_new_node(g, &op_wpart, &x, 1, vt_new_act(g, 3, shape));
    if (!n) return NULL;
    *VT_OP_P(n, win_p) = p;
    if (p.C == Cm) n->grad_sets = 1u; /* every map element is some window token's */
    return n->out;
}

vt_tensor *vt_window_reverse(vt_graph *g, vt_tensor *xw, int H, int W, int wh, int ww, int sh, int sw) {
    return vt_window_reverse_add(g, xw, NULL, H, W, wh, ww, sh, sw);
}

/* vt_window_reverse_add (cat 0) or vt_window_reverse_cat (cat 1: r the tail). */
static vt_tensor *window_reverse2(vt_graph *g, vt_tensor *xw, vt_tensor *r, int cat, int H, int W, int wh, int ww,
                                  int sh, int sw) {
    if (vt_bad(g, 1, xw) || (r && vt_bad(g, 1, r))) return NULL;
    char sx[64], what[160];
    vt_shape_str(xw, sx, 64);
    snprintf(what, sizeof what, "windows %s for a %dx%d map", sx, H, W);
    if (H < 1 || W < 1) return vt_fail(g, "window_reverse", "%s: the map size must be positive", what);
    win_p p;
    if (win_geom(g, "window_reverse", what, 1, H, W, 1, wh, ww, sh, sw, &p)) return NULL;
    const int nW = p.nWh * p.nWw;
    if (xw->ndim != 3 || (int64_t)xw->shape[1] != (int64_t)wh * ww || xw->shape[0] % nW)
        return vt_fail(g, "window_reverse", "%s must be (B·%d, %d, C) (%dx%d windows of %dx%d tokens)", what, nW,
                       wh * ww, p.nWh, p.nWw, wh, ww);
    p.B = xw->shape[0] / nW;
    p.C = p.Cm = xw->shape[2];
    const int Ct = cat ? r->shape[r->ndim - 1] : 0;
    if (cat && (Ct < 1 || r->numel != (int64_t)p.B * H * W * Ct)) {
        char sr[64];
        return vt_fail(g, "window_reverse", "%s: the appended channels %s must be a (%d, %d, %d, C') map", what,
                       vt_shape_str(r, sr, 64), p.B, H, W);
    }
    p.Cm += Ct;
    p.tail = cat;
    const int shape[4] = {p.B, H, W, p.Cm};
    if (r && !cat && (r->numel != (int64_t)p.B * H * W * p.C || r->shape[r->ndim - 1] != p.C)) {
        char sr[64];
        return vt_fail(g, "window_reverse", "%s: the added term %s must hold the (%d, %d, %d, %d) map", what,
                       vt_shape_str(r, sr, 64), p.B, H, W, p.C);
    }
    vt_tensor *in[2] = {xw, r};
    vt_node *n = vt_new_node(g, &op_wrev, in, r ? 2 : 1, vt_new_act(g, 4, shape));
    if (!n) return NULL;
    *VT_OP_P(n, win_p) = p;
    n->grad_sets = r ? 3u : 1u; /* the windows' gradient is gathered whole (padding tokens: zeros), r's is dy's */
    return n->out;
}

vt_tensor *vt_window_reverse_add(vt_graph *g, vt_tensor *xw, vt_tensor *r, int H, int W, int wh, int ww, int sh,
                                 int sw) {
    return window_reverse2(g, xw, r, 0, H, W, wh, ww, sh, sw);
}

vt_tensor *vt_window_reverse_cat(vt_graph *g, vt_tensor *xw, vt_tensor *t, int H, int W, int wh, int ww, int sh,
                                 int sw) {
    if (vt_bad(g, 2, xw, t)) return NULL;
    return window_reverse2(g, xw, t, 1, H, W, wh, ww, sh, sw);
}

/* ---- Swin shift mask ----
 * Microsoft's and torchvision's construction: on the padded Hp×Wp map, rows are labelled by the slices
 * (0, −wh), (−wh, −sh), (−sh, None) and columns by (0, −ww), (−ww, −sw), (−sw, None) with Python semantics
 * (−0 is 0, so with no shift the last slice is the whole axis; later slices overwrite earlier ones); the map of
 * labels is cut into windows (no roll: the labels describe the rolled map) and pair (i, j) of a window gets 0 when
 * both tokens carry the same (row, column) label, −100 otherwise. */

/* Python's normalisation of a slice bound i on an axis of n. */
static int py_bound(int i, int n) {
    if (i < 0) i = i + n < 0 ? 0 : i + n;
    return i > n ? n : i;
}

/* The three slices of one axis of n positions, window w, shift s: [0, e0), [a1, e1), [a2, n). */
typedef struct {
    int e0, a1, e1, a2;
} axis_slices;

static axis_slices slices_of(int n, int w, int s) {
    return (axis_slices){py_bound(-w, n), py_bound(-w, n), py_bound(-s, n), py_bound(-s, n)};
}

/* The label of position y: the last slice holding it. */
static inline int region(int y, const axis_slices *a) {
    int r = -1;
    if (y < a->e0) r = 0;
    if (a->a1 <= y && y < a->e1) r = 1;
    if (a->a2 <= y) r = 2;
    return r;
}

/* 1 when the arguments describe a valid mask. */
static int mask_args_ok(int Hp, int Wp, int wh, int ww, int sh, int sw) {
    return Hp > 0 && Wp > 0 && wh > 0 && ww > 0 && Hp % wh == 0 && Wp % ww == 0 && sh >= 0 && sh < Hp && sw >= 0 &&
           sw < Wp && (double)Hp * Wp * wh * ww <= INT_MAX; /* nW·N·N = Hp·Wp·wh·ww elements */
}

int vt_window_shift_mask_fill(float *mask, int Hp, int Wp, int wh, int ww, int sh, int sw) {
    if (!mask_args_ok(Hp, Wp, wh, ww, sh, sw)) return -1;
    const int nWw = Wp / ww, nW = Hp / wh * nWw, N = wh * ww;
    const axis_slices rows = slices_of(Hp, wh, sh), cols = slices_of(Wp, ww, sw);
#pragma omp parallel for schedule(static) if ((int64_t)nW * N * N > PAR_MIN)
    for (int w = 0; w < nW; w++) {
        const int Y0 = w / nWw * wh, X0 = w % nWw * ww;
        float *m = mask + (size_t)w * N * N;
        /* labels never decrease along an axis: a window with equal labels at its corners is one region */
        if (region(Y0, &rows) == region(Y0 + wh - 1, &rows) && region(X0, &cols) == region(X0 + ww - 1, &cols)) {
            memset(m, 0, sizeof(float) * (size_t)N * N);
            continue;
        }
        for (int yi = 0; yi < wh; yi++) {
            const int ri = region(Y0 + yi, &rows);
            for (int xi = 0; xi < ww; xi++) {
                const int ci = region(X0 + xi, &cols);
                for (int yj = 0; yj < wh; yj++) {
                    const int same_row = region(Y0 + yj, &rows) == ri;
                    for (int xj = 0; xj < ww; xj++)
                        *m++ = same_row && region(X0 + xj, &cols) == ci ? 0.0f : -100.0f;
                }
            }
        }
    }
    return 0;
}

typedef struct {
    int Hp, Wp, wh, ww, sh, sw;
} smask_p;

static void smask_fwd(vt_node *n) {
    const smask_p *p = VT_OP_P(n, smask_p);
    vt_window_shift_mask_fill(n->out->data, p->Hp, p->Wp, p->wh, p->ww, p->sh, p->sw);
}

static void smask_bwd(vt_node *n) { (void)n; }

static const vt_opdef op_smask = {"window_shift_mask", smask_fwd, smask_bwd, VT_READS(0), NULL, VT_OP_OTHER};

vt_tensor *vt_window_shift_mask(vt_graph *g, int Hp, int Wp, int wh, int ww, int sh, int sw) {
    if (vt_bad(g, 0)) return NULL;
    if (!mask_args_ok(Hp, Wp, wh, ww, sh, sw))
        return vt_fail(g, "window_shift_mask",
                       "padded map %dx%d, window %dx%d, shift (%d, %d): the map must be whole windows and the shift "
                       "in [0, %d) x [0, %d)", Hp, Wp, wh, ww, sh, sw, Hp, Wp);
    const int N = wh * ww, shape[3] = {Hp / wh * (Wp / ww), N, N};
    vt_node *n = vt_new_node(g, &op_smask, NULL, 0, vt_new_act(g, 3, shape));
    if (!n) return NULL;
    *VT_OP_P(n, smask_p) = (smask_p){Hp, Wp, wh, ww, sh, sw};
    return n->out;
}

/* ---- relative position bias gather ----
 * bias[h, i, j] = table[idx(i, j), h], idx = (y_i − y_j + wh − 1)·(2ww − 1) + (x_i − x_j + ww − 1) for tokens
 * i = y_i·ww + x_i of a wh×ww window. Backward: table row t (offset (dy, dx)) sums the bias gradient over every
 * pair with that offset, so each gradient element is written by one task. */

typedef struct {
    int wh, ww, H;
} rpb_p;

void vt_rel_pos_index_fill(float *idx, int wh, int ww) {
    const int N = wh * ww, L = 2 * ww - 1;
    for (int i = 0; i < N; i++) {
        const int base = (i / ww + wh - 1) * L + i % ww + ww - 1;
        for (int yj = 0; yj < wh; yj++)
            for (int xj = 0; xj < ww; xj++) *idx++ = (float)(base - yj * L - xj);
    }
}

static void rpb_fwd(vt_node *n) {
    const rpb_p *p = VT_OP_P(n, rpb_p);
    const int wh = p->wh, ww = p->ww, H = p->H, N = wh * ww, L = 2 * ww - 1;
    const float *tab = n->in[0]->data;
    float *y = n->out->data;
#pragma omp parallel for schedule(static) if ((int64_t)H * N * N > PAR_MIN)
    for (int r = 0; r < H * N; r++) { /* row (h, i) */
        const int h = r / N, i = r % N, base = (i / ww + wh - 1) * L + i % ww + ww - 1;
        float *yr = y + (size_t)r * N;
        for (int yj = 0; yj < wh; yj++) {
            const float *t = tab + (size_t)(base - yj * L) * H + h; /* offset xj = 0; xj steps back one row */
            for (int xj = 0; xj < ww; xj++) yr[yj * ww + xj] = t[-(ptrdiff_t)xj * H];
        }
    }
}

static void rpb_bwd(vt_node *n) {
    float *dt = n->in[0]->grad;
    if (!dt) return;
    const rpb_p *p = VT_OP_P(n, rpb_p);
    const int wh = p->wh, ww = p->ww, H = p->H, N = wh * ww, L = 2 * ww - 1, T = (2 * wh - 1) * L;
    const float *dy = n->out->grad;
#pragma omp parallel for schedule(static) if ((int64_t)H * N * N > PAR_MIN)
    for (int r = 0; r < T * H; r++) { /* table element (t, h) */
        const int t = r / H, h = r % H, oy = t / L - (wh - 1), ox = t % L - (ww - 1);
        const int y0 = oy > 0 ? oy : 0, y1 = oy < 0 ? wh + oy : wh, x0 = ox > 0 ? ox : 0, x1 = ox < 0 ? ww + ox : ww;
        const float *d = dy + (size_t)h * N * N;
        float s = 0.0f;
        for (int yi = y0; yi < y1; yi++)
            for (int xi = x0; xi < x1; xi++) {
                const int i = yi * ww + xi, j = (yi - oy) * ww + xi - ox;
                s += d[(size_t)i * N + j];
            }
        dt[r] += s;
    }
}

static const vt_opdef op_rpb = {"rel_pos_bias", rpb_fwd, rpb_bwd, VT_READS(0), NULL, VT_OP_OTHER};

vt_tensor *vt_rel_pos_bias(vt_graph *g, vt_tensor *table, int wh, int ww) {
    if (vt_bad(g, 1, table)) return NULL;
    char st[64];
    const int64_t T = (2LL * wh - 1) * (2LL * ww - 1);
    if (wh < 1 || ww < 1 || (int64_t)wh * ww * wh * ww > INT_MAX || table->ndim != 2 || table->shape[0] != T)
        return vt_fail(g, "rel_pos_bias", "table %s (%s) must be ((2·%d − 1)·(2·%d − 1) = %lld, heads)",
                       vt_shape_str(table, st, 64), table->name, wh, ww, (long long)T);
    const int N = wh * ww, shape[3] = {table->shape[1], N, N};
    vt_node *n = vt_new_node(g, &op_rpb, &table, 1, vt_new_act(g, 3, shape));
    if (!n) return NULL;
    *VT_OP_P(n, rpb_p) = (rpb_p){wh, ww, table->shape[1]};
    return n->out;
}

/* ---- Swin patch merging: (B, H, W, C) -> (B, ⌈H/2⌉·⌈W/2⌉, 4C) ----
 * Output token (oy, ox) holds the blocks x[2oy, 2ox], x[2oy + 1, 2ox], x[2oy, 2ox + 1], x[2oy + 1, 2ox + 1]
 * (torchvision's x0..x3), zeros past an odd edge. */

typedef struct {
    int B, H, W, C, Ho, Wo;
} pm_p;

/* fwd: tokens = gathered map (zeros past the edge); otherwise map += tokens (the adjoint; = when acc is 0). */
static void pm_move(const pm_p *p, float *map, float *tok, int fwd, int acc) {
    const int H = p->H, W = p->W, Ho = p->Ho, Wo = p->Wo;
    const size_t C = (size_t)p->C;
    const int64_t R = (int64_t)p->B * Ho;
#pragma omp parallel for schedule(static) if (R * Wo * 4 * (int64_t)C > PAR_MIN)
    for (int64_t r = 0; r < R; r++) {
        const int64_t b = r / Ho;
        const int oy = (int)(r % Ho);
        for (int ox = 0; ox < Wo; ox++) {
            float *t = tok + ((size_t)r * Wo + ox) * 4 * C;
            for (int k = 0; k < 4; k++) {
                const int Y = 2 * oy + (k & 1), X = 2 * ox + (k >> 1);
                float *tk = t + k * C;
                if (Y >= H || X >= W) {
                    if (fwd) memset(tk, 0, sizeof(float) * C);
                    continue;
                }
                float *m = map + (((size_t)b * H + Y) * W + X) * C;
                if (fwd)
                    move(tk, m, C, 0);
                else
                    move(m, tk, C, acc);
            }
        }
    }
}

static void pm_fwd(vt_node *n) { pm_move(VT_OP_P(n, pm_p), n->in[0]->data, n->out->data, 1, 0); }
static void pm_bwd(vt_node *n) { /* every map element is in one token: a fresh gradient is written (grad_sets) */
    if (n->in[0]->grad) pm_move(VT_OP_P(n, pm_p), n->in[0]->grad, n->out->grad, 0, !(n->grad_fresh & 1u));
}

static const vt_opdef op_pm = {"patch_merge", pm_fwd, pm_bwd, VT_READS(0), NULL, VT_OP_OTHER};

vt_tensor *vt_patch_merge(vt_graph *g, vt_tensor *x) {
    if (vt_bad(g, 1, x)) return NULL;
    char sx[64];
    if (x->ndim != 4 || (int64_t)x->shape[3] * 4 > INT_MAX)
        return vt_fail(g, "patch_merge", "input %s must be (B, H, W, C)", vt_shape_str(x, sx, 64));
    const int B = x->shape[0], H = x->shape[1], W = x->shape[2], C = x->shape[3], Ho = (H + 1) / 2, Wo = (W + 1) / 2;
    const int shape[3] = {B, Ho * Wo, 4 * C};
    vt_node *n = vt_new_node(g, &op_pm, &x, 1, vt_new_act(g, 3, shape));
    if (!n) return NULL;
    *VT_OP_P(n, pm_p) = (pm_p){B, H, W, C, Ho, Wo};
    n->grad_sets = 1u;
    return n->out;
}

/* ---- non-overlapping patches: (B, H, W, C) -> (B, (H/p)·(W/p), C·p·p), order (c, ky, kx) in a patch ----
 * The layout of a PyTorch Conv2d weight (Cout, C, p, p) viewed as (Cout, C·p·p), so a k = s = p convolution is a
 * vt_linear on the result. Each patch is a (p·p) × C -> C × (p·p) transpose whose p rows of p·C floats stay in
 * L1: 8×8 register transposes (transpose8.h) where p and C are multiples of 8 (PVT's stage-1 reduction, p = 8,
 * C = 64: 1.7× the per-channel loop at batch 1, 1.2× at 16; AMD EPYC Zen 3, 2026-11-28), else a loop order by p
 * (long kx runs for p >= 4, C-long runs otherwise). */

typedef struct {
    int B, H, W, C, p, Ho, Wo;
} pf_p;

/* fwd: patches = gathered map; otherwise map += patches (the adjoint; = when acc is 0). */
static void pf_move(const pf_p *q, float *map, float *pat, int fwd, int acc) {
    const int p = q->p, W = q->W, Ho = q->Ho, Wo = q->Wo, C = q->C;
    const size_t pp = (size_t)p * p, rowf = (size_t)W * C;
    const int64_t R = (int64_t)q->B * Ho;
#pragma omp parallel for schedule(static) if (R * Wo * (int64_t)pp * C > PAR_MIN)
    for (int64_t r = 0; r < R; r++) { /* (b, py): map rows r·p .. r·p + p − 1 */
        for (int px = 0; px < Wo; px++) {
            float *pt = pat + ((size_t)r * Wo + px) * pp * C;
            float *m0 = map + (size_t)r * p * rowf + (size_t)px * p * C;
#if defined(__AVX__)
            if (p % 8 == 0 && C % 8 == 0) { /* 8 taps x 8 channels per register transpose */
                for (int ky = 0; ky < p; ky++)
                    for (int kx = 0; kx < p; kx += 8)
                        for (int c = 0; c < C; c += 8) {
                            float *mr = m0 + ky * rowf + (size_t)kx * C + c, *dr = pt + (size_t)c * pp + ky * p + kx;
                            if (fwd)
                                transpose8(mr, C, dr, (ptrdiff_t)pp, 0);
                            else
                                transpose8(dr, (ptrdiff_t)pp, mr, C, acc);
                        }
                continue;
            }
#endif
            if (p >= 4) { /* per channel: p² strided reads, p² contiguous writes */
                for (int c = 0; c < C; c++) {
                    float *d = pt + (size_t)c * pp;
                    for (int ky = 0; ky < p; ky++) {
                        float *mr = m0 + ky * rowf + c, *dr = d + (size_t)ky * p;
                        if (fwd)
                            for (int kx = 0; kx < p; kx++) dr[kx] = mr[(size_t)kx * C];
                        else if (acc)
                            for (int kx = 0; kx < p; kx++) mr[(size_t)kx * C] += dr[kx];
                        else
                            for (int kx = 0; kx < p; kx++) mr[(size_t)kx * C] = dr[kx];
                    }
                }
            } else { /* short kx loops: per tap, C contiguous reads and writes strided by p² (measured 2x faster) */
                for (int ky = 0; ky < p; ky++)
                    for (int kx = 0; kx < p; kx++) {
                        float *mr = m0 + ky * rowf + (size_t)kx * C, *dr = pt + ky * p + kx;
                        if (fwd)
                            for (int c = 0; c < C; c++) dr[(size_t)c * pp] = mr[c];
                        else if (acc)
                            for (int c = 0; c < C; c++) mr[c] += dr[(size_t)c * pp];
                        else
                            for (int c = 0; c < C; c++) mr[c] = dr[(size_t)c * pp];
                    }
            }
        }
    }
}

static void pf_fwd(vt_node *n) { pf_move(VT_OP_P(n, pf_p), n->in[0]->data, n->out->data, 1, 0); }
static void pf_bwd(vt_node *n) { /* the patches tile the map: a fresh gradient is written (grad_sets) */
    if (n->in[0]->grad) pf_move(VT_OP_P(n, pf_p), n->in[0]->grad, n->out->grad, 0, !(n->grad_fresh & 1u));
}

static const vt_opdef op_pf = {"patchify_nhwc", pf_fwd, pf_bwd, VT_READS(0), NULL, VT_OP_OTHER};

vt_tensor *vt_patchify_nhwc(vt_graph *g, vt_tensor *x, int p) {
    if (vt_bad(g, 1, x)) return NULL;
    char sx[64];
    vt_shape_str(x, sx, 64);
    if (x->ndim != 4 || p < 1 || x->shape[1] % p || x->shape[2] % p || (int64_t)x->shape[3] * p * p > INT_MAX)
        return vt_fail(g, "patchify_nhwc", "input %s must be (B, H, W, C) with H and W multiples of the patch %d", sx,
                       p);
    const int B = x->shape[0], H = x->shape[1], W = x->shape[2], C = x->shape[3], Ho = H / p, Wo = W / p;
    const int shape[3] = {B, Ho * Wo, C * p * p};
    if (p == 1) return vt_reshape(g, x, 3, shape); /* the same floats: a free view */
    vt_node *n = vt_new_node(g, &op_pf, &x, 1, vt_new_act(g, 3, shape));
    if (!n) return NULL;
    *VT_OP_P(n, pf_p) = (pf_p){B, H, W, C, p, Ho, Wo};
    n->grad_sets = 1u;
    return n->out;
}
