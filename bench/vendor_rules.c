/* Measures the GEMM dispatch's vendor-specific rules (vt_gemm_plan.intel: rule 5's inference case, 8, 9, 10's
 * Aᵀ·B part, 11 and PVT's patch-embed convolution) on the machine at hand: one model's graph built twice in one
 * process, once with the plan's intel flag as detected and once flipped (before the build, so build-time choices
 * follow it too), the two run alternately, and the per-round time ratio printed. Identical arithmetic up to float
 * rounding. With --tail-n the second graph flips rule 14 (vt_gemm_plan.tail_n) instead of the intel flag, with --pack
 * rule 12 (vt_gemm_plan.pack_w), with --wt-first rule 15 (vt_gemm_plan.wt_first).
 * With --bf16 the second graph keeps the detected flag and runs --dtype bf16 instead (vt_gemm_plan_bf16), to measure
 * bf16 against fp32 the same way and, with --check, how far its logits and gradients are from fp32's.
 * Usage: vendor_rules MODEL BATCH [train|eval] [ROUNDS] [--check] [--bf16 | --tail-n | --pack | --wt-first]: prints
 * each round's seconds and, at the end, the median and best ratios flipped (or bf16) / detected (below 1: the second
 * graph is faster here). Forward only for eval; for train, forward + backward (no optimizer step: the same for both).
 * --check first prints the largest difference of the two graphs' logits, and for train of each parameter's gradient,
 * relative to that tensor's largest magnitude. Build: make build/vendor_rules. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vitc/graph.h"
#include "vitc/model.h"
#include "vitc/ops.h"
#include "vitc/rng.h"

typedef struct {
    vt_graph *g;
    vt_tensor *x, *labels, *logits;
} built;

/* The model's graph on P with the plan's intel, tail_n, pack_w and wt_first flags set to f[0..3] (-1: as detected);
 * 0 or -1 with e set. */
static int build(const vt_model_cfg *c, vt_params *P, int batch, int train, const int f[4], built *b, vt_err *e) {
    b->g = vt_graph_new(P, train, e);
    if (!b->g) return -1;
    if (f[0] >= 0) b->g->gemm.intel = f[0];
    if (f[1] >= 0) b->g->gemm.tail_n = f[1];
    if (f[2] >= 0) b->g->gemm.pack_w = f[2];
    if (f[3] >= 0) b->g->gemm.wt_first = f[3];
    b->logits = vt_model_build(b->g, c, batch, &b->x);
    b->labels = NULL;
    if (train) {
        b->labels = vt_input(b->g, "labels", 1, &batch);
        vt_graph_set_loss(b->g, vt_cross_entropy(b->g, b->logits, b->labels, 0.1f));
    }
    vt_graph_output(b->g, b->logits);
    return vt_graph_finalize(b->g, e);
}

static double step(built *b, vt_params *P, int train) {
    const double t0 = omp_get_wtime();
    vt_graph_forward(b->g);
    if (train) {
        vt_params_zero_grad(P);
        vt_graph_backward(b->g);
    }
    return omp_get_wtime() - t0;
}

/* --check: the two graphs' logits, and for train every parameter's gradient, relative to the tensor's largest
 * magnitude, over the tensors whose largest magnitude is at least 1e-3 of the largest gradient of all (below that,
 * e.g. a bias followed by a train-mode BatchNorm, whose gradient is rounding noise around 0, the difference relative
 * to the largest gradient of all): prints "check: logits R, worst gradient R (NAME), tiny gradients R"; 0, or 1 when
 * out of memory. */
static int check_same(built *b, vt_params *P, int train) {
    double worst_g = 0.0, d = 0.0, m = 0.0;
    const char *worst = "-";
    step(&b[0], P, train);
    float **g0 = calloc((size_t)P->n, sizeof *g0);
    if (!g0) return 1;
    for (int k = 0; train && k < P->n; k++)
        if (P->t[k]->grad) {
            if (!(g0[k] = malloc(sizeof(float) * (size_t)P->t[k]->numel))) return 1;
            memcpy(g0[k], P->t[k]->grad, sizeof(float) * (size_t)P->t[k]->numel);
        }
    step(&b[1], P, train);
    for (int64_t i = 0; i < b[0].logits->numel; i++) {
        const double di = fabs((double)b[0].logits->data[i] - b[1].logits->data[i]);
        d = di == di ? fmax(d, di) : INFINITY; /* a NaN is the worst difference (fmax would drop it) */
        m = fmax(m, fabs((double)b[0].logits->data[i]));
    }
    double all = 0.0, tiny = 0.0; /* the largest gradient of all; the tiny tensors' largest difference */
    for (int k = 0; k < P->n; k++)
        for (int64_t i = 0; g0[k] && i < P->t[k]->numel; i++) all = fmax(all, fabs((double)g0[k][i]));
    for (int k = 0; k < P->n; k++) {
        if (!g0[k]) continue;
        double gd = 0.0, gm = 0.0;
        for (int64_t i = 0; i < P->t[k]->numel; i++) {
            const double di = fabs((double)g0[k][i] - P->t[k]->grad[i]);
            gd = di == di ? fmax(gd, di) : INFINITY;
            gm = fmax(gm, fabs((double)g0[k][i]));
        }
        if (gm < 1e-3 * all)
            tiny = fmax(tiny, gd);
        else if (!(gd / gm <= worst_g))
            worst_g = gd / gm, worst = P->t[k]->name;
        free(g0[k]);
    }
    free(g0);
    printf("check: logits %.3g, worst gradient %.3g (%s), tiny gradients %.3g\n", m > 0.0 ? d / m : d, worst_g, worst,
           all > 0.0 ? tiny / all : tiny);
    return 0;
}

static int cmp(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    if (argc < 3)
        return fprintf(stderr, "usage: vendor_rules MODEL BATCH [train|eval] [ROUNDS] [--check] [--bf16 | --tail-n | "
                               "--pack | --wt-first]\n"),
               2;
    int check = 0, bf16 = 0, tail = 0, pack = 0, wtf = 0, npos = 0;
    const char *pos[4] = {"", "0", "eval", "12"}; /* MODEL BATCH [train|eval] [ROUNDS], options anywhere */
    for (int i = 1; i < argc; i++) {
        if (strncmp(argv[i], "--", 2) != 0) {
            if (npos == 4) return fprintf(stderr, "unexpected argument %s\n", argv[i]), 2;
            pos[npos++] = argv[i];
        } else if (strcmp(argv[i], "--check") == 0)
            check = 1;
        else if (strcmp(argv[i], "--bf16") == 0)
            bf16 = 1;
        else if (strcmp(argv[i], "--tail-n") == 0)
            tail = 1;
        else if (strcmp(argv[i], "--pack") == 0)
            pack = 1;
        else if (strcmp(argv[i], "--wt-first") == 0)
            wtf = 1;
        else
            return fprintf(stderr, "unknown option %s\n", argv[i]), 2;
    }
    const vt_model_cfg *c0 = vt_model_find(pos[0]);
    if (!c0) return fprintf(stderr, "unknown model %s\n", pos[0]), 2;
    const int batch = atoi(pos[1]), train = strcmp(pos[2], "train") == 0, rounds = atoi(pos[3]);
    const char *alt = bf16 ? "bf16" : "flipped";
    if (batch < 1 || rounds < 1) return fprintf(stderr, "batch and rounds must be positive\n"), 2;
    if (!train && strcmp(pos[2], "eval") != 0) return fprintf(stderr, "mode %s: train or eval\n", pos[2]), 2;
    if (bf16 + tail + pack + wtf > 1)
        return fprintf(stderr, "--bf16, --tail-n, --pack and --wt-first: one at a time\n"), 2;
    const vt_model_cfg tc = train ? vt_model_training_form(c0) : *c0, *c = &tc;
    vt_model_cfg tb = tc;
    tb.arch.bf16 = bf16;
    vt_err e = {0};
    vt_params *P = vt_params_new(&e);
    built b[2];
    const int asis[4] = {-1, -1, -1, -1};
    if (!P || vt_model_init_params(c, P, 0, &e) || build(c, P, batch, train, asis, &b[0], &e))
        return fprintf(stderr, "%s\n", e.msg), 1;
    const vt_gemm_plan *d = &b[0].g->gemm;
    const int flip[4] = {bf16 || tail || pack || wtf ? -1 : !d->intel, tail ? !d->tail_n : -1, pack ? !d->pack_w : -1,
                         wtf ? !d->wt_first : -1};
    if (build(&tb, P, batch, train, flip, &b[1], &e)) return fprintf(stderr, "%s\n", e.msg), 1;
    vt_rng rng;
    vt_rng_seed(&rng, 1);
    for (int64_t i = 0; i < b[0].x->numel; i++) b[0].x->data[i] = b[1].x->data[i] = vt_rng_normal(&rng);
    for (int i = 0; train && i < batch; i++)
        b[0].labels->data[i] = b[1].labels->data[i] = (float)vt_rng_below(&rng, (uint32_t)c->arch.num_classes);
    printf("%s batch %d %s, %d threads; detected intel=%d tail_n=%d pack_w=%d wt_first=%d, %s intel=%d tail_n=%d "
           "pack_w=%d wt_first=%d%s\n",
           pos[0], batch, train ? "train (forward + backward)" : "eval (forward)", omp_get_max_threads(),
           b[0].g->gemm.intel, b[0].g->gemm.tail_n, b[0].g->gemm.pack_w, b[0].g->gemm.wt_first, alt,
           b[1].g->gemm.intel, b[1].g->gemm.tail_n, b[1].g->gemm.pack_w, b[1].g->gemm.wt_first,
           bf16 ? " with --dtype bf16" : "");
    for (int w = 0; w < 2; w++) step(&b[0], P, train), step(&b[1], P, train); /* warm-up */
    if (check && check_same(b, P, train)) return 1;
    double *ratio = malloc(sizeof(double) * (size_t)rounds), best[2] = {1e30, 1e30};
    if (!ratio) return fprintf(stderr, "out of memory\n"), 1;
    for (int r = 0; r < rounds; r++) {
        double t[2];
        const int first = r & 1; /* alternate which goes first */
        t[first] = step(&b[first], P, train);
        t[!first] = step(&b[!first], P, train);
        for (int k = 0; k < 2; k++) best[k] = fmin(best[k], t[k]);
        ratio[r] = t[1] / t[0];
        printf("round %d: detected %.4f s, %s %.4f s, ratio %.3f\n", r, t[0], alt, t[1], ratio[r]);
    }
    qsort(ratio, (size_t)rounds, sizeof *ratio, cmp);
    printf("%s b%d %s: %s/detected median %.3f, best %.3f (%.4f / %.4f s)\n", pos[0], batch,
           train ? "train" : "eval", alt, rounds % 2 ? ratio[rounds / 2] : 0.5 * (ratio[rounds / 2 - 1] + ratio[rounds / 2]),
           best[1] / best[0], best[1], best[0]);
    free(ratio);
    for (int k = 0; k < 2; k++) vt_graph_free(b[k].g);
    vt_params_free(P);
    return 0;
}
