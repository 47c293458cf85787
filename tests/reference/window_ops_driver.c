/* Driver of tests/reference/test_window_ops.py: torchvision's shifted_window_attention followed by its patch
 * merging, built from vitc ops (window partition, linear, relative-position bias, shift mask, vt_attention_ex,
 * window reverse, patch merge), and the same windows reversed with x's channels appended (vt_window_reverse_cat).
 * Compiled by the test against build/libvitc.a.
 * usage: window_ops_driver B H W C heads wh ww sh sw IN OUT
 * IN: float32 x (B, H, W, C), qkv weight (3C, C), qkv bias (3C), proj weight (C, C), proj bias (C), bias table
 *     ((2wh−1)(2ww−1), heads), r (B, H, W, C), r2 (B, ⌈H/2⌉·⌈W/2⌉, 4C), r3 (B, H, W, 2C);
 *     loss = Σ y·r + Σ merge(y)·r2 + Σ cat(y, x)·r3 (cat: the channels, one vt_window_reverse_cat).
 * OUT: float32 y, merge(y), cat(y, x), dloss/dx, dloss/dtable, dloss/dqkv_weight, the relative_position_index (N×N) and,
 *     when a shift remains, the shift mask (nW, N, N). Shifts are cleared where the window covers the padded map,
 *     as torchvision does. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "vitc/ops.h"

static int rd(FILE *f, vt_tensor *t) { return fread(t->data, sizeof(float), (size_t)t->numel, f) == (size_t)t->numel; }

int main(int argc, char **argv) {
    if (argc != 12) {
        fprintf(stderr, "usage: %s B H W C heads wh ww sh sw IN OUT\n", argv[0]);
        return 2;
    }
    int v[9];
    for (int i = 0; i < 9; i++) v[i] = atoi(argv[1 + i]);
    const int B = v[0], H = v[1], W = v[2], C = v[3], nh = v[4], wh = v[5], ww = v[6];
    const int Hp = (H + wh - 1) / wh * wh, Wp = (W + ww - 1) / ww * ww;
    const int sh = wh >= Hp ? 0 : v[7], sw = ww >= Wp ? 0 : v[8]; /* torchvision clears covered shifts */
    vt_err e = {0};
    vt_params *P = vt_params_new(&e);
    vt_graph *g = vt_graph_new(P, 1, &e);
    const int xs[4] = {B, H, W, C}, wq[2] = {3 * C, C}, bq[1] = {3 * C}, wp[2] = {C, C}, bp[1] = {C},
              ts[2] = {(2 * wh - 1) * (2 * ww - 1), nh};
    const vt_init z = {VT_INIT_ZERO, 0};
    vt_tensor *x = vt_param(g, "x", 4, xs, z), *Wq = vt_param(g, "wq", 2, wq, z), *Bq = vt_param(g, "bq", 1, bq, z);
    vt_tensor *Wo = vt_param(g, "wp", 2, wp, z), *Bo = vt_param(g, "bp", 1, bp, z), *tab = vt_param(g, "tab", 2, ts, z);
    vt_tensor *qkv = vt_linear(g, vt_window_partition(g, x, wh, ww, sh, sw), Wq, Bq);
    const vt_attn_args a = {.heads = nh, .dim = C, .q_off = 0, .k_off = C, .v_off = 2 * C,
                            .scale = 1.0f / sqrtf((float)(C / nh)), .bias = vt_rel_pos_bias(g, tab, wh, ww),
                            .mask = sh + sw > 0 ? vt_window_shift_mask(g, Hp, Wp, wh, ww, sh, sw) : NULL};
    vt_tensor *yw = vt_linear(g, vt_attention_ex(g, qkv, NULL, &a), Wo, Bo);
    vt_tensor *y = vt_window_reverse(g, yw, H, W, wh, ww, sh, sw);
    vt_tensor *pm = vt_patch_merge(g, y), *yc = vt_window_reverse_cat(g, yw, x, H, W, wh, ww, sh, sw);
    const int cs[4] = {B, H, W, 2 * C};
    vt_tensor *r = vt_input(g, "r", 4, xs), *r2 = pm ? vt_input(g, "r2", 3, pm->shape) : NULL;
    vt_tensor *r3 = vt_input(g, "r3", 4, cs);
    vt_graph_set_loss(g, vt_add(g, vt_add(g, vt_sum(g, vt_mul(g, y, r)), vt_sum(g, vt_mul(g, pm, r2))),
                                vt_sum(g, vt_mul(g, yc, r3))));
    vt_graph_output(g, y);
    vt_graph_output(g, pm);
    vt_graph_output(g, yc);
    if (vt_graph_finalize(g, &e)) {
        fprintf(stderr, "build: %s\n", e.msg);
        return 1;
    }
    FILE *f = fopen(argv[10], "rb");
    if (!f || !rd(f, x) || !rd(f, Wq) || !rd(f, Bq) || !rd(f, Wo) || !rd(f, Bo) || !rd(f, tab) || !rd(f, r) ||
        !rd(f, r2) || !rd(f, r3)) {
        fprintf(stderr, "cannot read %s\n", argv[10]);
        return 1;
    }
    fclose(f);
    vt_graph_forward(g);
    vt_params_zero_grad(P);
    vt_graph_backward(g);
    const int N = wh * ww, nW = Hp / wh * (Wp / ww);
    float *idx = malloc(sizeof(float) * (size_t)N * N), *mask = malloc(sizeof(float) * (size_t)nW * N * N);
    vt_rel_pos_index_fill(idx, wh, ww);
    const int has_mask = sh + sw > 0 && vt_window_shift_mask_fill(mask, Hp, Wp, wh, ww, sh, sw) == 0;
    f = fopen(argv[11], "wb");
    int ok = f != NULL;
    const vt_tensor *outs[9] = {y, pm, yc, x, tab, Wq, Bq, Wo, Bo};
    for (int i = 0; ok && i < 9; i++) {
        const float *d = i < 3 ? outs[i]->data : outs[i]->grad;
        ok = fwrite(d, sizeof(float), (size_t)outs[i]->numel, f) == (size_t)outs[i]->numel;
    }
    ok = ok && fwrite(idx, sizeof(float), (size_t)N * N, f) == (size_t)N * N;
    if (has_mask) ok = ok && fwrite(mask, sizeof(float), (size_t)nW * N * N, f) == (size_t)nW * N * N;
    if (f) ok = fclose(f) == 0 && ok;
    free(idx);
    free(mask);
    vt_graph_free(g);
    vt_params_free(P);
    if (!ok) fprintf(stderr, "cannot write %s\n", argv[11]);
    return ok ? 0 : 1;
}
