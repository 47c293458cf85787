/* vitc attention's library entry (src/infer/attention.c): index lists, and its errors for a model whose blocks
 * export no attention map (a conv-only family made here: no registered model lacks attention) and for a missing
 * output. The maps themselves, and the other errors, are checked in tests/reference/test_attention.py. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "test.h"
#include "vitc/attention.h"
#include "vitc/blocks.h"

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

void test_attention(vt_test *T) {
    check_lists(T);
    check_errors(T);
}
