/* Swin family (src/models/swin.c): the weight-decay rule of the official recipes, and the torchvision layout on a
 * non-square input through the library (the CLI takes square images), where a shift is zeroed on one axis only.
 * The PyTorch comparison of every named model is tests/reference/test_swin.py. */
#include <math.h>
#include <string.h>

#include "test.h"
#include "vitc/model.h"

/* Configures `name` reduced (widths 16..128, given depths and heads) at image size img. */
static int reduced(const char *name, int img, const int depths[4], const int heads[4], vt_model_cfg *c, vt_err *e) {
    vt_model_overrides ov = vt_model_no_overrides();
    const int dims[4] = {16, 32, 64, 128};
    for (int i = 0; i < 4; i++) {
        ov.dims[i] = dims[i];
        ov.depths[i] = depths[i];
        ov.heads[i] = heads[i];
    }
    ov.img_size = img;
    ov.num_classes = 10;
    const vt_model_cfg *base = vt_model_find(name);
    return base ? vt_model_configure(base, &ov, c, e) : vt_seterr(e, "%s is not registered", name);
}

/* no_decay of the parameter `name` in P (-1 if absent). */
static int decay_flag(const vt_params *P, const char *name) {
    const vt_tensor *t = vt_params_find(P, name);
    return t ? t->no_decay : -1;
}

static void check_no_decay(vt_test *T) {
    static const struct {
        const char *model, *param;
        int no_decay;
    } cases[] = {
        {"flatten_swin_tiny", "layers.2.blocks.0.attn.relative_position_bias_table", 1}, /* the official keyword */
        {"flatten_swin_tiny", "layers.0.blocks.0.attn.positional_encoding", 0}, /* 3-D, no keyword: decayed */
        {"flatten_swin_tiny", "layers.0.blocks.0.attn.scale", 0},
        {"flatten_swin_tiny", "layers.0.blocks.0.attn.qkv.weight", 0},
        {"flatten_swin_tiny", "layers.0.blocks.0.attn.qkv.bias", 1},
        {"flatten_swin_tiny", "layers.0.blocks.0.norm1.weight", 1},
        {"flatten_swin_tiny", "layers.0.downsample.reduction.weight", 0},
        {"flatten_swin_tiny", "patch_embed.proj.weight", 0},
        {"swin_t_msf", "features.1.0.attn.relative_position_bias_table", 1},
        {"swin_t_msf", "features.1.0.attn.qkvp.weight", 0},
        {"swin_t_msf", "features.0.2.weight", 1},
        {"swin_t_msf", "head.bias", 1},
    };
    const int depths[4] = {1, 1, 1, 1}, heads[4] = {1, 2, 4, 8};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        vt_err e = {0};
        vt_model_cfg c;
        vt_params *P = vt_params_new(&e);
        int ok = P && reduced(cases[k].model, 64, depths, heads, &c, &e) == 0 &&
                 vt_model_init_params(&c, P, 1, &e) == 0;
        T_CHECK(T, ok, "%s: init: %s", cases[k].model, e.msg);
        if (ok)
            T_CHECK(T, decay_flag(P, cases[k].param) == cases[k].no_decay, "%s: %s no_decay %d, want %d",
                    cases[k].model, cases[k].param, decay_flag(P, cases[k].param), cases[k].no_decay);
        vt_params_free(P);
    }
}

/* swin_t reduced on a 44x60 input: stage maps 11x15, 6x8, 3x4, 2x2; in stage 1 (6x8, window 7) the rows fit one
 * window (no row shift) while the columns pad to 14 and shift by 3. Builds, runs and gives finite maps and logits. */
static void check_non_square(vt_test *T) {
    const int depths[4] = {2, 2, 1, 1}, heads[4] = {2, 2, 4, 4};
    vt_err e = {0};
    vt_model_cfg c;
    vt_params *P = vt_params_new(&e);
    int ok = P && reduced("swin_t", 64, depths, heads, &c, &e) == 0 && vt_model_init_params(&c, P, 2, &e) == 0;
    T_CHECK(T, ok, "swin_t reduced: %s", e.msg);
    for (int feats = 0; ok && feats < 2; feats++) {
        vt_graph *g = vt_graph_new(P, 0, &e);
        const int xs[4] = {2, 3, 44, 60};
        vt_tensor *x = g ? vt_input(g, "input", 4, xs) : NULL, *maps[VT_MAX_STAGES] = {0}, *y = NULL;
        if (feats) {
            const int n = x ? c.family->features(g, &c, x, maps) : -1;
            T_CHECK(T, n == 4, "features: %d maps: %s", n, g ? g->err.msg : e.msg);
            for (int i = 0; i < 4 && n == 4; i++) vt_graph_output(g, maps[i]);
        } else {
            y = x ? c.family->build(g, &c, x) : NULL;
            if (y) vt_graph_output(g, y);
        }
        if (!g || (!feats && !y) || vt_graph_finalize(g, &e)) {
            T_CHECK(T, 0, "44x60 graph: %s", g && g->err.msg[0] ? g->err.msg : e.msg);
            vt_graph_free(g);
            break;
        }
        for (int64_t i = 0; i < x->numel; i++) x->data[i] = sinf(0.37f * (float)i);
        vt_graph_forward(g);
        static const int hw[4][2] = {{11, 15}, {6, 8}, {3, 4}, {2, 2}};
        for (int i = 0; feats && i < 4; i++) {
            const vt_tensor *m = maps[i];
            T_CHECK(T, m->shape[0] == 2 && m->shape[1] == 16 << i && m->shape[2] == hw[i][0] && m->shape[3] == hw[i][1],
                    "map %d shape (%d, %d, %d, %d)", i, m->shape[0], m->shape[1], m->shape[2], m->shape[3]);
        }
        const vt_tensor *o = feats ? maps[3] : y;
        int finite = 1;
        for (int64_t i = 0; i < o->numel; i++) finite &= isfinite(o->data[i]) != 0;
        T_CHECK(T, finite && (feats || (y->shape[0] == 2 && y->shape[1] == 10)), "44x60 %s finite and shaped",
                feats ? "maps" : "logits");
        vt_graph_free(g);
    }
    vt_params_free(P);
}

void test_swin(vt_test *T) {
    check_no_decay(T);
    check_non_square(T);
}
