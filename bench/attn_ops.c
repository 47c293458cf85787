/* hMHSA's fused attention (vt_hallucinated_attention, src/ops/hattn.c) against the plain fused attention
 * (vt_attention_ex, src/ops/attention.c), one op at a time, at the shapes a host runs them: the plain op with the
 * host's heads, the hallucinated one with twice as many heads of half the width (the *_hmhsa_cffn models' doubled
 * heads), both on random inputs, alternated call by call in one process, the best call of each kept. Forward only for
 * eval; for train, forward and backward with every gradient (the queries', keys', values' and IHH's and CHH's weights')
 * from a sum of the output.
 * Usage: attn_ops HOST [eval|train] [BATCH] [ROUNDS]; HOST: pvt_v2_b1 (four stages, 7 x 7 reduced keys),
 * nextvit_small (stages 3 and 4, whose NTBs attend to 7 x 7 keys) or deit_tiny (197 tokens: a class token and 14 x 14 keys). Prints
 * per stage both ops' best milliseconds, hallucinated over plain, and the MACs' ratio. Build: make build/attn_ops. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_graph.h"
#include "vitc/blocks.h"
#include "vitc/graph.h"
#include "vitc/ops.h"
#include "vitc/rng.h"

typedef struct {
    const char *name;
    int s0, nst, packed; /* the first stage timed (the host's numbering) and how many; packed: self-attention on a
                          * packed qkv with a class token, else reduced keys */
    int N[4], heads[4]; /* queries and the host's heads per stage */
    int dh, kh, kw;     /* the host's head width; the key grid */
} host;

static const host hosts[] = {
    {"pvt_v2_b1", 1, 4, 0, {3136, 784, 196, 49}, {1, 2, 5, 8}, 64, 7, 7},
    {"nextvit_small", 3, 2, 0, {196, 49}, {12, 24}, 32, 7, 7},
    {"deit_tiny", 1, 1, 1, {197}, {3}, 64, 14, 14},
};

typedef struct {
    bench_graph bg;
    int64_t macs;
} built;

/* An input (eval) or a parameter (train: its gradient is computed) of the given shape, filled from rng. */
static vt_tensor *operand(vt_graph *g, const char *name, int ndim, const int *shape, int train) {
    return train ? vt_param(g, name, ndim, shape, (vt_init){VT_INIT_NORMAL, 0.5f}) : vt_input(g, name, ndim, shape);
}

/* Stage s of host h as the plain (hal 0) or the hallucinated op (hal 1), batch B; 0 or -1 with e set. */
static int build(const host *h, int s, int hal, int B, int train, built *b, vt_err *e) {
    if (!(b->bg.P = vt_params_new(e)) || !(b->bg.g = vt_graph_new(b->bg.P, train, e))) return -1;
    vt_graph *g = b->bg.g;
    const int C = h->heads[s] * h->dh, N = h->N[s], M = h->packed ? N : h->kh * h->kw, H = h->heads[s];
    const int lq = h->packed ? (hal ? 2 * C : 3 * C) : (hal ? C / 2 : C), lkv = hal ? 3 * C / 2 : 2 * C;
    const int qs[3] = {B, N, lq}, ks[3] = {B, M, lkv}, h2 = H, ws[4] = {h2, 1, 3, 3}, cs[4] = {h2, h2, 1, 1};
    vt_tensor *q = operand(g, "q", 3, qs, train), *kv = h->packed ? NULL : operand(g, "kv", 3, ks, train), *y;
    if (!hal) {
        const vt_attn_args a = {.heads = H, .dim = C, .q_off = 0, .k_off = h->packed ? C : 0,
                                .v_off = h->packed ? 2 * C : C, .scale = 0.125f};
        y = vt_attention_ex(g, q, kv, &a);
    } else {
        const vt_init w = {VT_INIT_NORMAL, 0.3f};
        const vt_hattn_args a = {.heads = 2 * H, .dim = C, .q_off = 0, .k_off = h->packed ? C / 2 : 0,
                                 .v_off = h->packed ? C : C / 2, .klead = h->packed, .kh = h->kh, .kw = h->kw,
                                 .scale = 0.17f, .ihh_w = vt_param(g, "ihh.weight", 4, ws, w),
                                 .ihh_b = vt_param(g, "ihh.bias", 1, &h2, w), .chh_w = vt_param(g, "chh.weight", 4, cs, w),
                                 .chh_b = vt_param(g, "chh.bias", 1, &h2, w)};
        y = vt_hallucinated_attention(g, q, kv, &a);
    }
    if (train)
        vt_graph_set_loss(g, vt_sum(g, y));
    else
        vt_graph_output(g, y);
    if (vt_graph_finalize(g, e)) return -1;
    vt_params_init(b->bg.P, 7);
    vt_rng rng;
    vt_rng_seed(&rng, 11);
    for (int k = 0; k < 2 && !train; k++) { /* the inputs of an eval graph */
        vt_tensor *t = k ? kv : q;
        for (int64_t i = 0; t && i < t->numel; i++) t->data[i] = 0.5f * vt_rng_normal(&rng);
    }
    b->macs = 0;
    for (int k = 0; k < g->nn; k++) b->macs += g->nodes[k]->macs;
    return 0;
}

int main(int argc, char **argv) {
    const host *h = NULL;
    for (size_t i = 0; argc > 1 && i < sizeof hosts / sizeof hosts[0]; i++)
        if (!strcmp(argv[1], hosts[i].name)) h = &hosts[i];
    const int train = argc > 2 && !strcmp(argv[2], "train"), B = argc > 3 ? atoi(argv[3]) : 16;
    const int rounds = argc > 4 ? atoi(argv[4]) : 30;
    if (!h || (argc > 2 && !train && strcmp(argv[2], "eval")) || B < 1 || rounds < 1) {
        fprintf(stderr, "usage: attn_ops pvt_v2_b1|nextvit_small|deit_tiny [eval|train] [BATCH] [ROUNDS]%s%s\n",
                argc > 1 && !h ? ": unknown host " : "", argc > 1 && !h ? argv[1] : "");
        return 2;
    }
    vt_err e = {0};
    for (int s = 0; s < h->nst; s++) {
        built p = {0}, q = {0};
        if (build(h, s, 0, B, train, &p, &e) || build(h, s, 1, B, train, &q, &e)) {
            fprintf(stderr, "attn_ops: %s\n", e.msg);
            return 1;
        }
        if (!s) {
            printf("%s, %s, batch %d, %d threads, best of %d calls each (alternated); ", h->name,
                   train ? "forward + backward" : "forward", B, p.bg.g->threads, rounds);
            bench_print_cpu();
        }
        double tp = 1e30, tq = 1e30;
        for (int r = 0; r < rounds; r++) {
            const double a = bench_graph_call(&p.bg, train), c = bench_graph_call(&q.bg, train);
            tp = a < tp ? a : tp;
            tq = c < tq ? c : tq;
        }
        printf("stage %d (%d queries, %d keys, %d heads of %d): plain %.3f ms, hallucinated %.3f ms, ratio %.3f, "
               "MACs ratio %.3f\n", h->s0 + s, h->N[s], h->packed ? h->N[s] : h->kh * h->kw, h->heads[s], h->dh,
               1e3 * tp, 1e3 * tq, tq / tp, (double)q.macs / (double)p.macs);
        bench_graph_free(&p.bg);
        bench_graph_free(&q.bg);
    }
    return 0;
}
