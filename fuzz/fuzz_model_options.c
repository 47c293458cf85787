/* libFuzzer target: the model options a weight file records (`vitc_model_options`, taken by the commands that load
 * --weights and by vitc_open) or a user types, for every named model. Parsing, configuring and building the model's
 * shapes (what `vitc info` counts; then its training graph) must accept or refuse with a message, never crash,
 * overflow or allocate without bound; a small model must also run (run_small); an accepted configuration's own record
 * must configure the same architecture again. Input: the first byte picks the model, the rest is the options text. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "vitc/graph.h"
#include "vitc/model.h"
#include "vitc/predict.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Refused with a message (every refusal must say why): 1; accepted: 0. */
static int refused(int rc, const vt_err *e) {
    if (rc && !e->msg[0]) abort();
    return rc != 0;
}

#define RUN_MACS 5000000 /* models of at most this many MACs an image also run */

/* Runs c's eval graph on one image (initialised weights, an input drawn from the fuzzer's bytes): it must build and
 * give finite logits, and its kernels stay inside their tensors at whatever shapes the options made (ASan). */
static void run_small(const vt_model_cfg *c, const uint8_t *data, size_t size) {
    vt_err e = {0};
    vt_params *P = vt_params_new(&e);
    vt_predictor p = {0};
    const size_t n = (size_t)c->arch.in_chans * (size_t)c->arch.img_size * (size_t)c->arch.img_size;
    float *x = malloc(sizeof(float) * n);
    if (!P || !x) abort();
    uint32_t h = 2166136261u; /* FNV-1a of the input, then a linear congruential stream */
    for (size_t i = 0; i < size; i++) h = (h ^ data[i]) * 16777619u;
    for (size_t i = 0; i < n; i++) x[i] = (float)((h = h * 1664525u + 1013904223u) >> 8) / 16777216.0f * 4.0f - 2.0f;
    if (vt_model_init_params(c, P, h, &e) || vt_predictor_init(&p, c, P, 1, VT_PRED_LOGITS, &e)) {
        if (!e.msg[0]) abort();
    } else {
        vt_predictor_forward(&p, x, 1);
        for (int k = 0; k < c->arch.num_classes; k++)
            if (!isfinite(p.logits->data[k])) abort();
    }
    vt_predictor_free(&p);
    vt_params_free(P);
    free(x);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char text[1024];
    if (size < 1 || size > sizeof text) return 0;
    const vt_model_cfg *base = vt_model_at(data[0] % vt_model_count());
    memcpy(text, data + 1, size - 1);
    text[size - 1] = '\0'; /* a NUL inside ends the text, as in a C string read from a file's metadata */
    vt_model_overrides ov = vt_model_no_overrides();
    char store[256];
    vt_err e = {0};
    if (refused(vt_model_parse_options(text, base->arch.nstages, &ov, store, sizeof store, 0, &e), &e)) return 0;
    vt_model_cfg c;
    if (refused(vt_model_configure(base, &ov, &c, &e), &e)) return 0;
    vt_model_summary s;
    if (refused(vt_model_summarize(&c, &s, &e), &e)) return 0;
    const int64_t macs = s.macs;
    vt_model_summary_free(&s);
    if (macs <= RUN_MACS) run_small(&c, data, size);
    /* the training graph too (its blocks take other paths: BatchNorm in train mode, no folded weights) */
    vt_params *P = vt_params_new(&e);
    if (!P) abort();
    P->shapes_only = 1;
    vt_graph *g = vt_graph_new(P, 1, &e);
    if (!g || (!vt_model_build(g, &c, 1, NULL) && !g->err.msg[0])) abort();
    vt_graph_free(g);
    vt_params_free(P);
    /* the record vitc writes for c (c.options, from vt_model_configure) builds c's architecture again */
    vt_model_overrides again = vt_model_no_overrides();
    char store2[256];
    vt_model_cfg c2;
    if (vt_model_parse_options(c.options, base->arch.nstages, &again, store2, sizeof store2, 1, &e) ||
        vt_model_configure(base, &again, &c2, &e))
        abort();
    c2.arch.train_form = c.arch.train_form; /* not an architecture option: the weights' form, recorded apart */
    c2.arch.int8 = c.arch.int8; /* run options, never recorded: the arithmetic, the kernels' weight copies */
    c2.arch.bf16 = c.arch.bf16;
    c2.arch.no_prepack = c.arch.no_prepack;
    c2.arch.drop_path = c.arch.drop_path;
    c2.pre = c.pre;
    if (memcmp(&c.arch, &c2.arch, sizeof c.arch) != 0) abort();
    return 0;
}
