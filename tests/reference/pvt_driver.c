/* Driver of tests/reference/test_pvt.py: runs a PVT-family model on an input of any height and width (the CLI's
 * `vitc forward` takes square inputs of the configured size only; PVTv2 accepts any H, W >= 29, PVT v1 resizes its
 * position embeddings). Compiled by the test
 * against build/libvitc.a.
 * usage: pvt_driver MODEL IMG DIMS DEPTHS HEADS CLASSES W.safetensors X.safetensors OUT.safetensors
 *   IMG: the configured image size (--img-size; 0 keeps the model's), which sizes PVT v1's pos_embed{i} (resized for
 *   other inputs as the official code does); DIMS, DEPTHS, HEADS: comma-separated per-stage overrides as vitc's
 *   --dims/--depths/--heads; CLASSES: the head;
 *   X holds `input` (B, C, H, W); OUT gets `logits` (B, CLASSES) of the eval graph. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vitc/model.h"
#include "vitc/safetensors.h"
#include "vitc/weights.h"

static void parse4(const char *s, int *v) {
    for (int i = 0; i < VT_MAX_STAGES && s && *s; i++) {
        v[i] = (int)strtol(s, NULL, 10);
        s = strchr(s, ',');
        if (s) s++;
    }
}

int main(int argc, char **argv) {
    if (argc != 10) {
        fprintf(stderr, "usage: %s MODEL IMG DIMS DEPTHS HEADS CLASSES W X OUT\n", argv[0]);
        return 2;
    }
    vt_err e = {0};
    const vt_model_cfg *base = vt_model_find(argv[1]);
    if (!base) {
        fprintf(stderr, "unknown model %s\n", argv[1]);
        return 1;
    }
    vt_model_overrides ov = vt_model_no_overrides();
    ov.img_size = atoi(argv[2]);
    parse4(argv[3], ov.dims);
    parse4(argv[4], ov.depths);
    parse4(argv[5], ov.heads);
    ov.num_classes = atoi(argv[6]);
    vt_model_cfg c;
    vt_params *P = vt_params_new(&e);
    vt_st_file f = {0};
    float *xin = NULL;
    int nd = 4, rc = 1;
    int64_t sh[VT_ST_MAXDIM];
    vt_graph *g = NULL;
    if (!P || vt_model_configure(base, &ov, &c, &e) || vt_model_init_params(&c, P, 0, &e) ||
        vt_params_load(P, argv[7], &e) || vt_st_open(argv[8], &f, &e) ||
        vt_st_read_named(&f, "input", &xin, &nd, sh, &e))
        goto done;
    if (nd != 4) {
        vt_seterr(&e, "input must be (B, C, H, W)");
        goto done;
    }
    g = vt_graph_new(P, 0, &e);
    const int xs[4] = {(int)sh[0], (int)sh[1], (int)sh[2], (int)sh[3]};
    vt_tensor *x = g ? vt_input(g, "input", 4, xs) : NULL;
    vt_tensor *y = x ? c.family->build(g, &c, x) : NULL;
    if (!y) {
        vt_seterr(&e, "%s", g ? g->err.msg : "graph");
        goto done;
    }
    vt_graph_output(g, y);
    if (vt_graph_finalize(g, &e)) goto done;
    memcpy(x->data, xin, sizeof(float) * (size_t)x->numel);
    vt_graph_forward(g);
    const vt_st_out out = {"logits", VT_ST_F32, 2, {y->shape[0], y->shape[1]}, y->data};
    rc = vt_st_write(argv[9], &out, 1, NULL, &e) ? 1 : 0;
done:
    if (rc) fprintf(stderr, "pvt_driver: %s\n", e.msg);
    vt_graph_free(g);
    vt_free(xin);
    vt_st_close(&f);
    vt_params_free(P);
    return rc;
}
