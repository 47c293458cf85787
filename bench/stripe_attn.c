/* CSwin's attention core as one op (vt_stripe_attention, src/ops/attention.c) against the op chain it replaces
 * (both branches' stripe partition, fused attention, LePE convolution and the reverse into the grid, as
 * src/blocks/cswin.c builds it with ref_kernels), at CSwin-T's stage shapes (224 px), on random inputs, alternated
 * call by call in one process. Forward only for eval; for train, forward and backward with every gradient (qkv's and
 * the LePE weights') from a sum of the output.
 * Usage: stripe_attn [eval|train] [BATCH] [ROUNDS]. Prints per stage the chain's and the op's best and median
 * milliseconds (after a warm-up call each) and the ratio of the medians. Build: make build/stripe_attn. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_graph.h"
#include "vitc/graph.h"
#include "vitc/ops.h"
#include "vitc/rng.h"


/* CSwin-T's stages 1-3 (the two-branch ones): grid side, stripe width, width, heads. */
static const int stages[3][4] = {{56, 1, 64, 2}, {28, 2, 128, 4}, {14, 7, 256, 8}};

/* One branch of the chain on the windows of t (nw, wh·ww, Lt): heads of hc channels at q_off, + C, + 2C, plus the LePE
 * (w, b) of its v channels -> (nw, wh·ww, hc). */
static vt_tensor *branch(vt_graph *g, vt_tensor *t, int C, int q_off, int hc, int heads, int wh, int ww, vt_tensor *w,
                         vt_tensor *b) {
    const vt_attn_args a = {.heads = heads, .dim = hc, .q_off = q_off, .k_off = q_off + C, .v_off = q_off + 2 * C,
                            .scale = 1.0f / sqrtf((float)(hc / heads))};
    vt_tensor *o = vt_attention_ex(g, t, NULL, &a);
    const int m4[4] = {t->shape[0], wh, ww, t->shape[2]}, m3[3] = {t->shape[0], wh * ww, hc};
    return vt_reshape(g, vt_dwconv_nhwc_ex(g, vt_reshape(g, t, 4, m4), q_off + 2 * C, w, b, 1, o), 3, m3);
}

static int build(int st, int fused, int B, int train, bench_graph *bt, vt_err *e) {
    if (!(bt->P = vt_params_new(e)) || !(bt->g = vt_graph_new(bt->P, train, e))) return -1;
    vt_graph *g = bt->g;
    const int S = stages[st][0], s = stages[st][1], C = stages[st][2], h = stages[st][3], hc = C / 2;
    const int qs[3] = {B, S * S, 3 * C}, ws[4] = {hc, 1, 3, 3};
    const vt_init in = {VT_INIT_NORMAL, 0.5f}, wi = {VT_INIT_NORMAL, 0.3f};
    /* training: qkv an activation (a scaled parameter), as the qkv linear's output is, so its gradient is written */
    vt_tensor *qkv = train ? vt_scale(g, vt_param(g, "qkv", 3, qs, in), 1.0f) : vt_input(g, "qkv", 3, qs);
    vt_tensor *lw[2], *lb[2], *y;
    for (int i = 0; i < 2; i++) {
        char nm[32];
        snprintf(nm, sizeof nm, "lepe%d.weight", i);
        lw[i] = vt_param(g, nm, 4, ws, wi);
        snprintf(nm, sizeof nm, "lepe%d.bias", i);
        lb[i] = vt_param(g, nm, 1, &hc, wi);
    }
    if (fused) {
        y = vt_stripe_attention(g, qkv, S, s, h, 1.0f / sqrtf((float)(C / h)), vt_concat(g, lw, 2, 0),
                                vt_concat(g, lb, 2, 0));
    } else {
        const int m4[4] = {B, S, S, 3 * C}, hs[3] = {B * (S / s), s * S, 3 * C};
        vt_tensor *vw = vt_window_partition_sel(g, vt_reshape(g, qkv, 4, m4), S, s, 0, 0, 3, hc);
        vt_tensor *o0 = branch(g, vw, hc, 0, hc, h / 2, S, s, lw[0], lb[0]);
        vt_tensor *o1 = branch(g, vt_reshape(g, qkv, 3, hs), C, hc, hc, h / 2, s, S, lw[1], lb[1]);
        y = vt_window_reverse_cat(g, o0, o1, S, S, S, s, 0, 0);
    }
    if (train)
        vt_graph_set_loss(g, vt_sum(g, y));
    else
        vt_graph_output(g, y);
    if (vt_graph_finalize(g, e)) return -1;
    vt_params_init(bt->P, 7);
    vt_rng rng;
    vt_rng_seed(&rng, 11);
    for (int64_t i = 0; !train && i < qkv->numel; i++) qkv->data[i] = 0.5f * vt_rng_normal(&rng);
    return 0;
}

static int cmp(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    const int train = argc > 1 && !strcmp(argv[1], "train"), B = argc > 2 ? atoi(argv[2]) : 16;
    const int rounds = argc > 3 ? atoi(argv[3]) : 20;
    if ((argc > 1 && !train && strcmp(argv[1], "eval")) || B < 1 || rounds < 1) {
        fprintf(stderr, "usage: stripe_attn [eval|train] [BATCH] [ROUNDS]\n");
        return 2;
    }
    vt_err e = {0};
    double *tc = malloc(sizeof(double) * (size_t)rounds), *tf = malloc(sizeof(double) * (size_t)rounds);
    if (!tc || !tf) {
        fprintf(stderr, "stripe_attn: out of memory\n");
        return 1;
    }
    for (int st = 0; st < 3; st++) {
        bench_graph c = {0}, f = {0};
        if (build(st, 0, B, train, &c, &e) || build(st, 1, B, train, &f, &e)) {
            fprintf(stderr, "stripe_attn: %s\n", e.msg);
            return 1;
        }
        if (!st) {
            printf("CSwin-T stages, %s, batch %d, %d threads, %d alternated calls each; ",
                   train ? "forward + backward" : "forward", B, c.g->threads, rounds);
            bench_print_cpu();
        }
        bench_graph_call(&c, train); /* a warm-up call each */
        bench_graph_call(&f, train);
        for (int r = 0; r < rounds; r++) {
            tc[r] = bench_graph_call(&c, train);
            tf[r] = bench_graph_call(&f, train);
        }
        qsort(tc, (size_t)rounds, sizeof(double), cmp);
        qsort(tf, (size_t)rounds, sizeof(double), cmp);
        const int lo = (rounds - 1) / 2, hi = rounds / 2;
        const double mc = 0.5 * (tc[lo] + tc[hi]), mf = 0.5 * (tf[lo] + tf[hi]);
        printf("stage %d (%dx%d grid, stripes %d, %d channels, %d heads): chain best %.3f median %.3f ms, op best "
               "%.3f median %.3f ms, chain / op (medians) %.3f\n", st + 1, stages[st][0], stages[st][0], stages[st][1],
               stages[st][2], stages[st][3], 1e3 * tc[0], 1e3 * mc, 1e3 * tf[0], 1e3 * mf, mc / mf);
        bench_graph_free(&c);
        bench_graph_free(&f);
    }
    free(tc);
    free(tf);
    return 0;
}
