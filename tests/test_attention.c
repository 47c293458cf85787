/* vitc attention's library entry (src/infer/attention.c): index lists, its errors for a model whose blocks export
 * no attention map (a conv-only family made here: no registered model lacks attention) and for a missing output, and
 * the drawn rows computed from a factorised map's factors (vt_attn_map_row without values: no N×M map) against the
 * rows of the materialised map (vt_attn_map_values), on FLatten's exported maps. The maps themselves, and the other
 * errors, are checked in tests/reference/test_attention.py. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test.h"
#include "vitc/attention.h"
#include "vitc/blocks.h"
#include "vitc/rng.h"

/* A 1×1 conv stem, global average pooling and a linear head: no attention anywhere. */
static vt_tensor *conv_only(vt_graph *g, const vt_model_cfg *c, vt_tensor *x) {
    vt_tensor *t = vt_conv2d_p(g, "stem", x, 4, 1, 1, 0, 1, 1);
    const int s3[3] = {x->shape[0], 4, x->shape[2] * x->shape[3]};
    return vt_linear_p(g, "head", vt_mean(g, vt_reshape(g, t, 3, s3), 2), c->arch.num_classes, 1, VT_INIT_W02);
}

static void check_lists(vt_test *T) {
    int out[4];
    vt_err e = {0};
    T_CHECK(T, vt_parse_index_list("0,5,11", "--blocks", out, 4, &e) == 3 && out[0] == 0 && out[2] == 11, "0,5,11");
    const char *bad[] = {"", "-1", "1,", ",1", "1,,2", "x", "1.5", "1 2", "99999999999", NULL};
    for (int i = 0; bad[i]; i++) {
        vt_clearerr(&e);
        T_CHECK(T, vt_parse_index_list(bad[i], "--blocks", out, 4, &e) < 0 && strstr(e.msg, "--blocks"),
                "'%s' must be refused naming the option (got '%s')", bad[i], e.msg);
    }
    vt_clearerr(&e);
    T_CHECK(T, vt_parse_index_list("1,2,3,4,5", "--heads", out, 4, &e) < 0 && strstr(e.msg, "more than 4"),
            "too many indices: %s", e.msg);
    vt_clearerr(&e);
    T_CHECK(T, vt_parse_index_list("1,0,1", "--heads", out, 4, &e) < 0 && strstr(e.msg, "1 given twice"),
            "an index twice: %s", e.msg);
}

static void check_errors(vt_test *T) {
    static const vt_family fam = {.name = "conv_only", .build = conv_only};
    vt_model_cfg c = {.name = "conv_only_test", .family = &fam,
                      .arch = {.img_size = 8, .in_chans = 1, .num_classes = 3, .nstages = 1},
                      .pre = {.mean = {0.5f, 0.5f, 0.5f}, .std = {0.5f, 0.5f, 0.5f}, .crop_pct = 1.0f}};
    snprintf(c.arch.stages[0].attn, sizeof c.arch.stages[0].attn, "none");
    char img[64], png[64];
    snprintf(img, sizeof img, "/tmp/vitc_attn_unit_%d.pgm", (int)getpid());
    snprintf(png, sizeof png, "/tmp/vitc_attn_unit_%d.png", (int)getpid());
    FILE *f = fopen(img, "wb");
    if (f) { /* an 8×8 binary PGM */
        fprintf(f, "P5 8 8 255\n");
        for (int i = 0; i < 64; i++) fputc(i * 4, f);
        fclose(f);
    }
    vt_err e = {0};
    vt_params *P = vt_params_new(&e);
    vt_attn_viz_opts o = {.png = png};
    const char *paths[1] = {img};
    T_CHECK(T, P && vt_attention_pictures(&c, P, paths, 1, &o, &e) < 0 && strstr(e.msg, "no attention maps"),
            "a model without attention: %s", e.msg);
    vt_clearerr(&e);
    vt_attn_viz_opts none = {0};
    T_CHECK(T, vt_attention_pictures(&c, P, paths, 1, &none, &e) < 0 && strstr(e.msg, "-o"), "no output: %s", e.msg);
    vt_params_free(P);
    remove(img);
    remove(png);
}

/* Every drawn row of m (each head, then the head mean) from its factors equals the one from its materialised values:
 * max |direct − materialised| / max |materialised| <= 1e-6 (the values are floats, the direct rows doubles). */
static void check_rows(vt_test *T, const vt_attn_map *m, const char *what) {
    int B = m->batch, gh = m->win_h > 0 ? m->win_h : m->kh, gw = m->win_h > 0 ? m->win_w : m->kw;
    float *vals = malloc(sizeof(float) * (size_t)B * m->heads * m->n * m->m);
    float *a = malloc(sizeof(float) * (size_t)gh * gw), *b = malloc(sizeof(float) * (size_t)gh * gw);
    double *work = malloc(sizeof(double) * (size_t)vt_attn_row_work(m));
    T_CHECK(T, vals && a && b && work && vt_attn_map_values(m, vals) == 0, "%s: out of memory", what);
    for (int h = 0; vals && a && b && work && h <= m->heads; h++) {
        const int hh = h == m->heads ? -1 : h;
        for (int j = 0; j < gh * gw; j++) a[j] = b[j] = NAN; /* every drawn cell must be written */
        vt_attn_map_row(m, vals, hh, a, work);
        vt_attn_map_row(m, NULL, hh, b, work);
        double err = 0.0, mx = 0.0;
        for (int j = 0; j < gh * gw; j++) {
            err = t_worse(err, fabs((double)a[j] - b[j]));
            mx = fmax(mx, fabs((double)a[j]));
        }
        T_CHECK(T, err <= 1e-6 * mx && mx > 0.0, "%s, head %d: direct rows differ from the materialised ones by %g "
                "(max %g)", what, hh, err, mx);
    }
    free(vals);
    free(a);
    free(b);
    free(work);
}

/* FLatten's maps (focused linear attention and the ReLU one, whose keys carry the positional encoding, kbias) of a
 * graph on random inputs, 2 heads on a 3×4 grid, with and without a class token: drawn from the factors as from the
 * materialised map; the same factors also as a softmax and a dot map (rows streamed; q̄·k), and the batch entries,
 * without a class token, as Swin-like padded, shifted windows of a 5×7 map. */
static void check_factor_rows(vt_test *T) {
    for (int lead = 0; lead < 2; lead++) {
        vt_err e = {0};
        vt_params *P = vt_params_new(&e);
        vt_graph *g = P ? vt_graph_new(P, 0, &e) : NULL;
        if (!g) {
            T_CHECK(T, 0, "graph: %s", e.msg);
            vt_params_free(P);
            return;
        }
        g->export_maps = 1;
        const int C = 8, H = 3, W = 4, N = lead + H * W, xs[3] = {4, N, 3 * C};
        const vt_flatten_cfg fc = {.heads = 2};
        vt_tensor *x = vt_input(g, "x", 3, xs);
        vt_graph_output(g, vt_flatten_core(g, "attn", x, 0, x, C, x, 2 * C, C, H, W, &fc));
        if (vt_graph_finalize(g, &e) || g->nmaps != 2) {
            T_CHECK(T, 0, "FLatten graph: %s (%d maps)", e.msg, g->nmaps);
            vt_graph_free(g);
            vt_params_free(P);
            return;
        }
        vt_params_init(P, 7);
        vt_rng rng;
        vt_rng_seed(&rng, 11 + lead);
        for (int64_t i = 0; i < x->numel; i++) x->data[i] = vt_rng_normal(&rng);
        vt_tensor *pe = g->maps[1]->kbias; /* zero-initialised: random, so that the key bias counts */
        T_CHECK(T, pe && g->maps[1]->relu, "relu_linear has a key bias and ReLU");
        for (int64_t i = 0; pe && i < pe->numel; i++) pe->data[i] = 0.5f * vt_rng_normal(&rng);
        vt_graph_forward(g);
        char what[VT_NAMELEN + 64];
        for (int i = 0; i < 2; i++) {
            vt_attn_map m = *g->maps[i];
            T_CHECK(T, m.form == VT_MAP_LINEAR && m.lead == lead, "%s: a linear map", m.name);
            snprintf(what, sizeof what, "%s, lead %d", m.name, lead);
            check_rows(T, &m, what);
            m.form = VT_MAP_SOFTMAX;
            m.scale = 0.7f;
            snprintf(what, sizeof what, "%s as softmax, lead %d", m.name, lead);
            check_rows(T, &m, what);
            m.form = VT_MAP_DOT;
            snprintf(what, sizeof what, "%s as dot, lead %d", m.name, lead);
            check_rows(T, &m, what);
            if (lead) continue;
            m = *g->maps[i]; /* 4 windows of 3×4 tokens over a 5×7 map: padding at the bottom and right, shifted */
            m.win_h = 5, m.win_w = 7, m.win_sh = 1, m.win_sw = 2;
            snprintf(what, sizeof what, "%s in windows", m.name);
            check_rows(T, &m, what);
        }
        vt_graph_free(g);
        vt_params_free(P);
    }
}

/* vt_flatten_core with FLatten-CSwin's LePE: prefix.get_v (C, 1, 3, 3) and its bias created after the module's own
 * parameters on a grid of every token; refused with leading (class) tokens, which its grid would not hold. */
static void check_flatten_lepe(vt_test *T) {
    for (int lead = 0; lead < 2; lead++) {
        vt_err e = {0};
        vt_params *P = vt_params_new(&e);
        vt_graph *g = P ? vt_graph_new(P, 0, &e) : NULL;
        const int C = 8, xs[3] = {2, lead + 9, 3 * C};
        const vt_flatten_cfg fc = {.heads = 2, .lepe = 1};
        vt_tensor *y = g ? vt_flatten_core(g, "attn", vt_input(g, "x", 3, xs), 0, vt_input(g, "k", 3, xs), C,
                                           vt_input(g, "v", 3, xs), 2 * C, C, 3, 3, &fc) : NULL;
        const vt_tensor *w = P ? vt_params_find(P, "attn.get_v.weight") : NULL;
        if (lead)
            T_CHECK(T, !y && g && strstr(g->err.msg, "LePE needs a grid of every token (1 leading)"),
                    "LePE with a class token refused: '%s'", g ? g->err.msg : e.msg);
        else
            T_CHECK(T, y && w && w->ndim == 4 && w->shape[0] == C && w->shape[2] == 3 && P->n >= 2 &&
                           !strcmp(P->t[P->n - 1]->name, "attn.get_v.bias"),
                    "LePE's parameters, last: %s", g ? g->err.msg : e.msg);
        vt_graph_free(g);
        vt_params_free(P);
    }
}

void test_attention(vt_test *T) {
    check_lists(T);
    check_errors(T);
    check_factor_rows(T);
    check_flatten_lepe(T);
}
