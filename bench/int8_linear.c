/* One linear layer y = x·wᵀ + b as vitc runs it in an fp32 eval graph and in an int8 one (the linear.onednn_int8
 * kernel: input quantisation, u8 × s8 matmul, per-channel output scales): milliseconds per forward, best of the
 * rounds, the two graphs alternated; the shapes of DeiT-T/S, Swin-T, the demo ViT and a sweep over K. It measured
 * the rule at q8_wanted (src/ops/gemm_lowp.c). Build and run: bash bench/int8_linear.sh [ROUNDS]. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "vitc/gemm.h"
#include "vitc/ops.h"

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

typedef struct {
    const char *what;
    int M, N, K;
} shape;

static const shape shapes[] = {
    {"DeiT-T b1 qkv", 197, 576, 192},      {"DeiT-T b1 fc2", 197, 192, 768},
    {"DeiT-T b16 qkv", 3152, 576, 192},    {"DeiT-T b16 proj", 3152, 192, 192},
    {"DeiT-T b16 fc1", 3152, 768, 192},    {"DeiT-T b16 fc2", 3152, 192, 768},
    {"DeiT-S b1 qkv", 197, 1152, 384},     {"DeiT-S b1 fc1", 197, 1536, 384},
    {"DeiT-S b16 qkv", 3152, 1152, 384},   {"DeiT-S b16 fc2", 3152, 384, 1536},
    {"Swin-T b1 s1 qkv", 3136, 288, 96},   {"Swin-T b1 s1 fc1", 3136, 384, 96},
    {"Swin-T b1 s1 fc2", 3136, 96, 384},   {"Swin-T b1 s3 fc1", 196, 1536, 384},
    {"Swin-T b1 s4 fc2", 49, 768, 3072},   {"Swin-T b16 s1 qkv", 50176, 288, 96},
    {"demo b128 qkv", 2176, 384, 128},     {"demo b128 proj", 2176, 128, 128},
    {"demo b128 fc1", 2176, 256, 128},     {"demo b128 fc2", 2176, 128, 256},
    {"K sweep", 2048, 512, 64},            {"K sweep", 2048, 512, 128},
    {"K sweep", 2048, 512, 192},           {"K sweep", 2048, 512, 256},
    {"K sweep", 2048, 512, 384},           {"K sweep", 2048, 512, 768},
    {"rows", 1, 1000, 768},                {"rows", 16, 1000, 384},
    {"rows", 49, 384, 1536},               {"rows", 8, 768, 768},
    {"PVTv2-b1 b16 s1 fc1", 50176, 512, 64}, {"PVTv2-b1 b16 s1 fc2", 50176, 64, 512},
    {"PVTv2-b1 b16 s1 q", 50176, 64, 64},  {"PVTv2-b1 b16 s2 fc1", 12544, 1024, 128},
    {"PVTv2-b1 b16 s2 fc2", 12544, 128, 1024}, {"PVTv2-b1 b16 s2 q", 12544, 128, 128},
    {"PVTv2-b1 b1 s1 fc1", 3136, 512, 64}, {"PVTv2-b1 b1 s2 q", 784, 128, 128},
    {"PVTv2-b1 b16 s3 fc1", 3136, 1280, 320}, {"PVTv2-b1 b16 s4 kv", 784, 1024, 512},
};

/* A graph with the layer (int8, for every shape; or fp32 under the automatic GEMM rule), its input filled; NULL on
 * error. */
static vt_graph *layer(vt_params *P, shape s, int int8, vt_tensor **x) {
    vt_err e = {0};
    vt_graph *g = vt_graph_new(P, 0, &e);
    if (!g) return NULL;
    g->int8 = int8;
    if (int8 && vt_gemm_plan_init(&g->gemm, "onednn", &e)) return NULL; /* int8 for every shape, not only the rule's */
    int xs[2] = {s.M, s.K}, ws[2] = {s.N, s.K}, bs[1] = {s.N};
    *x = vt_input(g, "x", 2, xs);
    vt_graph_output(g, vt_linear(g, *x, vt_param(g, "w", 2, ws, (vt_init){VT_INIT_NORMAL, 0.02f}),
                                 vt_param(g, "b", 1, bs, (vt_init){VT_INIT_NORMAL, 0.02f})));
    if (vt_graph_finalize(g, &e)) {
        fprintf(stderr, "%s\n", e.msg);
        vt_graph_free(g);
        return NULL;
    }
    vt_rng r;
    vt_rng_seed(&r, 1);
    for (int64_t i = 0; i < (*x)->numel; i++) (*x)->data[i] = vt_rng_normal(&r);
    return g;
}

/* Best seconds of one forward over a burst of about 30 ms. */
static double burst(vt_graph *g) {
    double best = 1e30, t0 = now_s();
    do {
        const double t = now_s();
        vt_graph_forward(g);
        const double d = now_s() - t;
        best = d < best ? d : best;
    } while (now_s() - t0 < 0.03);
    return best;
}

int main(int argc, char **argv) {
    const int rounds = argc > 1 ? atoi(argv[1]) : 3;
    vt_gemm_plan p;
    vt_err e = {0};
    vt_gemm_plan_init(&p, NULL, &e);
    vt_machine m;
    vt_machine_probe(&m);
    printf("cpu %s, oneDNN %s, OpenBLAS %s, %d threads; int8 weight levels ±%d\n", m.cpu_model, m.onednn_isa,
           m.openblas_core, omp_get_max_threads(), vt_gemm_q8_levels(&p));
    printf("%-20s %6s %6s %6s %10s %10s %8s %s\n", "layer", "M", "N", "K", "fp32 ms", "int8 ms", "fp32/int8",
           "int8 GOP/s");
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
        const shape s = shapes[i];
        vt_params *P = vt_params_new(&e);
        vt_tensor *x[2];
        vt_graph *g[2] = {layer(P, s, 0, &x[0]), layer(P, s, 1, &x[1])};
        if (!g[0] || !g[1]) return 1;
        vt_params_init(P, 2);
        double best[2] = {1e30, 1e30};
        for (int r = 0; r < rounds; r++)
            for (int k = 0; k < 2; k++) {
                const double t = burst(g[k]);
                best[k] = t < best[k] ? t : best[k];
            }
        const vt_node *n = g[1]->nodes[g[1]->nn - 1];
        printf("%-20s %6d %6d %6d %10.3f %10.3f %8.2f %.1f%s\n", s.what, s.M, s.N, s.K, 1e3 * best[0], 1e3 * best[1],
               best[0] / best[1], 2.0 * s.M * s.N * s.K / best[1] / 1e9,
               n->kern && strcmp(n->kern->name, "linear.onednn_int8") == 0 ? "" : "  (int8 graph ran fp32)");
        vt_graph_free(g[0]);
        vt_graph_free(g[1]);
        vt_params_free(P);
    }
    return 0;
}
