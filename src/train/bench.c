/* Throughput benchmarks: one model's img/s, GMACs, achieved GFLOP/s against the measured sgemm peak; the input
 * pipeline's img/s alone. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "vitc/augment.h"
#include "vitc/ops.h"
#include "vitc/optim.h"
#include "vitc/predict.h"
#include "vitc/progress.h"
#include "vitc/train.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* CPU seconds so far: the machine's busy and stolen (the first line of /proc/stat, counted in clock ticks of `tick`
 * seconds) and this process's own (getrusage, every thread). */
typedef struct {
    double busy, steal, own, tick;
} cpu_clock;

/* c now; -1 where /proc/stat or the process's usage cannot be read (not Linux). */
static int cpu_clock_read(cpu_clock *c) {
    unsigned long long v[8] = {0}; /* user nice system idle iowait irq softirq steal */
    const long hz = sysconf(_SC_CLK_TCK);
    struct rusage ru;
    FILE *f = fopen("/proc/stat", "r");
    if (!f) return -1;
    const int n = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5],
                         &v[6], &v[7]);
    fclose(f);
    if (n < 7 || hz <= 0 || getrusage(RUSAGE_SELF, &ru) != 0) return -1;
    c->tick = 1.0 / (double)hz;
    c->busy = (double)(v[0] + v[1] + v[2] + v[5] + v[6]) * c->tick; /* guest time is inside user */
    c->steal = (double)v[7] * c->tick;
    c->own = (double)ru.ru_utime.tv_sec + 1e-6 * (double)ru.ru_utime.tv_usec + (double)ru.ru_stime.tv_sec +
             1e-6 * (double)ru.ru_stime.tv_usec;
    return 0;
}

/* GFLOP/s of a 1024³ int8 linear layer (vt_gemm_q8_run: the input quantised every run, the weight at the first)
 * with the process's thread setting, best of 8 after that first; 0 where the plan makes no int8 layer. */
static double int8_peak(const float *x, const float *w, float *y, int n) {
    vt_gemm_plan p;
    double best = 0.0;
    if (vt_gemm_plan_init(&p, getenv("VITC_GEMM"), NULL)) return 0.0;
    vt_gemm_q8 *q = vt_gemm_q8_linear(&p, n, n, n, 0, VT_GEMM_POST_NONE, 0);
    uint8_t *xq = q ? malloc((size_t)n * n) : NULL;
    for (int rep = 0; xq && rep < 9; rep++) {
        double t = now_s();
        if (vt_gemm_q8_run(q, x, xq, w, NULL, NULL, y, 0) != 0) break;
        t = now_s() - t;
        if (rep && 2.0 * n * n * n / t / 1e9 > best) best = 2.0 * n * n * n / t / 1e9;
    }
    free(xq);
    vt_gemm_plan_free(&p);
    return best;
}

/* GFLOP/s of a 1024³ sgemm with the process's thread setting on OpenBLAS and on oneDNN, and with bf16 set the same
 * product on a bf16 plan (best of 5 each, alternating), with int8 set the int8 layer's (int8_peak), each kept where it
 * beats r's figure so far (vt_bench measures twice: before the timed steps and after them); r->sgemm_gflops is the
 * better of the first two. A measured rate on this host, not an upper bound: the graph's kernels (weights packed once,
 * other shapes) can run faster than this product. */
static void gemm_peaks(vt_bench_result *r, int bf16, int int8) {
    const int n = 1024;
    const vt_threads_env env = vt_threads_enter(vt_threads_usable(omp_get_max_threads()));
    float *a = malloc(sizeof(float) * n * n), *b = malloc(sizeof(float) * n * n), *c = malloc(sizeof(float) * n * n);
    vt_gemm_plan p[3];
    double best[3] = {0.0, 0.0, 0.0};
    int np = 0; /* plans made: OpenBLAS, oneDNN, then with bf16 a bf16 one */
    while (a && b && c && np < (bf16 ? 3 : 2) && !vt_gemm_plan_init(&p[np], np ? "onednn" : "openblas", NULL)) np++;
    if (np == 3 && vt_gemm_plan_bf16(&p[2], NULL)) vt_gemm_plan_free(&p[--np]); /* refused: no bf16 figure */
    for (int i = 0; a && b && i < n * n; i++) a[i] = b[i] = (float)(i % 7) * 0.1f; /* int8_peak's inputs too */
    if (np >= 2) {
        for (int rep = 0; rep < 5; rep++)
            for (int l = 0; l < np; l++) {
                double t = now_s();
                vt_gemm(&p[l], 0, 0, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
                t = now_s() - t;
                if (2.0 * n * n * n / t / 1e9 > best[l]) best[l] = 2.0 * n * n * n / t / 1e9;
            }
    }
    for (int l = 0; l < np; l++) vt_gemm_plan_free(&p[l]);
    const double i8 = int8 && a && b && c ? int8_peak(a, b, c, n) : 0.0;
    vt_threads_leave(env);
    free(a);
    free(b);
    free(c);
    if (i8 > r->int8_gflops) r->int8_gflops = i8;
    if (best[0] > r->sgemm_openblas) r->sgemm_openblas = best[0];
    if (best[1] > r->sgemm_onednn) r->sgemm_onednn = best[1];
    r->sgemm_gflops = r->sgemm_openblas > r->sgemm_onednn ? r->sgemm_openblas : r->sgemm_onednn;
    if (bf16 && best[2] > r->bf16_gflops) r->bf16_gflops = best[2];
}

/* The process's peak resident set so far, MiB (ru_maxrss is in KiB on Linux); 0 where unknown. */
static double maxrss_mib(void) {
    struct rusage ru;
    return getrusage(RUSAGE_SELF, &ru) == 0 ? (double)ru.ru_maxrss / 1024.0 : 0.0;
}

int vt_bench(const vt_model_cfg *cfg, int batch, int train, int iters, FILE *profile, FILE *progress,
             vt_bench_result *r, vt_err *e) {
    const vt_model_cfg tc = train ? vt_model_training_form(cfg) : *cfg, *c = &tc; /* a training step: training form */
    vt_params *P = vt_params_new(e);
    if (!P || vt_model_init_params(c, P, 0, e)) {
        vt_params_free(P);
        return -1;
    }
    vt_graph *g = vt_graph_new(P, train, e);
    vt_tensor *x;
    vt_tensor *logits = vt_model_build(g, c, batch, &x), *labels = NULL;
    if (train) {
        labels = vt_input(g, "labels", 1, &batch);
        vt_graph_set_loss(g, vt_model_loss(g, vt_cross_entropy(g, logits, labels, 0.1f)));
    }
    vt_graph_output(g, logits);
    vt_adamw opt = {0};
    int rc = vt_graph_finalize(g, e);
    if (rc == 0 && train) rc = vt_adamw_init(&opt, P, 0.9f, 0.999f, 1e-8f, 0.05f, e);
    double t = 0.0, best = 0.0;
    double rss_model = 0.0, rss_probe = 0.0; /* peak RSS before the first gemm_peaks, and after it */
    cpu_clock c0 = {0}, c1 = {0};
    int clocked = 0;
    r->other_cpus = r->steal_cpus = -1.0;
    r->sgemm_gflops = r->sgemm_openblas = r->sgemm_onednn = r->bf16_gflops = r->int8_gflops = 0.0;
    if (rc == 0) {
        vt_rng rng;
        vt_rng_seed(&rng, 1);
        for (int64_t i = 0; i < x->numel; i++) x->data[i] = vt_rng_normal(&rng);
        for (int b = 0; train && b < batch; b++) labels->data[b] = (float)vt_rng_below(&rng, (uint32_t)c->arch.num_classes);
        vt_progress pg;
        for (int it = -2; it < iters; it++) { /* two warm-up iterations */
            if (it == -1) {
                /* the sgemm peak's first measurement (the second after the timed steps; each figure the better of
                 * the two: the host's speed drifts), after one step, when every buffer a step uses is resident
                 * (the probe's 12 MiB stack on the model's peak: rss_model is the model's), before the second
                 * warm-up step, which re-warms the caches the probe evicted */
                rss_model = maxrss_mib();
                gemm_peaks(r, c->arch.bf16, c->arch.int8 && !train);
                rss_probe = maxrss_mib();
            }
            if (it == 0) {
                clocked = cpu_clock_read(&c0) == 0;
                t = now_s();
                if (profile && (rc = vt_graph_enable_profile(g, e))) break;
                vt_progress_start(&pg, iters > 1 ? progress : NULL, train ? "bench train" : "bench infer", "img",
                                  iters, 0); /* (one timed step: nothing to show) */
                pg.units = batch;
            }
            const double t0 = now_s();
            vt_graph_forward(g);
            if (train) {
                vt_params_zero_grad(P);
                vt_graph_backward(g);
                vt_adamw_step(&opt, 1e-4f);
            }
            const double ti = now_s() - t0;
            if (it >= 0 && (it == 0 || ti < best)) best = ti;
            if (it >= 0) vt_progress_update(&pg, it + 1);
        }
        t = now_s() - t;
        /* /proc/stat counts each CPU's time in clock ticks, up to a tick off at each end: known only where that is
         * at most a quarter CPU over the timed steps (2 CPUs at 100 Hz: 0.16 s) */
        const long online = sysconf(_SC_NPROCESSORS_ONLN);
        if (clocked && cpu_clock_read(&c1) == 0 && online > 0 && 2.0 * (double)online * c1.tick <= 0.25 * t) {
            const double other = (c1.busy - c0.busy) - (c1.own - c0.own);
            r->other_cpus = other > 0.0 ? other / t : 0.0;
            r->steal_cpus = c1.steal > c0.steal ? (c1.steal - c0.steal) / t : 0.0;
        }
        if (rc == 0) vt_progress_end(&pg);
    }
    if (rc == 0) {
        int64_t macs = vt_graph_macs(g);
        r->ms_per_iter = 1e3 * t / iters;
        r->ms_best_iter = 1e3 * best;
        r->img_per_s = (double)batch * iters / t;
        vt_model_summary sum;
        vt_err se = {0};
        const int have = vt_model_summarize(c, &sum, &se) == 0; /* the model's MACs (every token) */
        r->gmacs_per_img = (double)(have ? sum.macs : macs / batch) / 1e9;
        if (have) vt_model_summary_free(&sum);
        r->gmacs_run_per_img = (double)macs / batch / 1e9;
        /* FLOPs = 2·MACs: of the forward, or of forward and backward (about 3× the forward: vt_graph_train_macs) */
        r->gflops = 2.0 * (double)(train ? vt_graph_train_macs(g) : macs) * iters / t / 1e9;
        r->arena_mib = (double)vt_graph_arena_bytes(g) / (1 << 20);
        r->params = vt_params_count(P, VT_PARAM);
        /* the model's own peak, without the probes' buffers: the timed steps' where they went above the first
         * probe's high-water mark, else the first step's (the later steps repeat it) */
        const double rss = maxrss_mib();
        r->peak_rss_mib = rss > rss_probe ? rss : rss_model;
        r->weight_copies_mib = (double)vt_gemm_weight_copy_bytes(&g->gemm) / (1 << 20);
        gemm_peaks(r, c->arch.bf16, c->arch.int8 && !train);
        vt_machine_probe(&r->machine);
        r->gemm = g->gemm;
        r->gemm.prims = NULL; /* the graph's, freed with it: the report keeps only the rule's inputs */
        r->gemm.calls_s = NULL;
        const vt_dtype_use u = vt_graph_dtype_use(g);
        r->linears = u.linears;
        r->int8_linears = u.int8;
        r->bf16_runs = u.bf16;
        vt_graph_profile_split(g, r->by_kind);
        r->fused_gemm = vt_graph_profile_fused_gemm(g);
        vt_graph_print_profile(g, profile);
    }
    vt_adamw_free(&opt);
    vt_graph_free(g);
    vt_params_free(P);
    return rc;
}

int vt_bench_input(const vt_data *d, int batch, int workers, int batches, double *img_per_s, vt_err *e) {
    if (batches < 1) return vt_seterr(e, "vt_bench_input: %d batches", batches);
    const int n = d->train.n;
    const int64_t want = (int64_t)batch * batches;
    float *x = vt_alloc(sizeof(float) * (size_t)d->train_tf.chans * d->train_tf.size * d->train_tf.width *
                        (size_t)batch, e);
    int *lab = malloc(sizeof(int) * (size_t)batch), *idx = malloc(sizeof(int) * (size_t)n);
    vt_loader *L = x && lab && idx ? vt_loader_new(&d->train, &d->train_tf, batch, workers, 3, VT_BAD_REPLACE, e)
                                   : NULL;
    int rc = L ? 0 : (x && lab && idx ? -1 : vt_seterr_code(e, VT_E_NOMEM, "out of memory"));
    int64_t got = 0;
    double t0 = now_s();
    for (int64_t epoch = 0; rc == 0 && got < want; epoch++) { /* as many passes over the data as `batches` needs */
        vt_iota(idx, n);
        int nb = vt_loader_start(L, idx, n, 1, 0, epoch, e);
        if (nb < 0) rc = -1;
        for (int k = 0; rc == 0 && k < nb && got < want; k++) {
            const int r = vt_loader_next(L, x, lab, e);
            if (r < 0) rc = -1;
            got += r > 0 ? r : 0;
        }
    }
    const double t = now_s() - t0;
    if (rc == 0) *img_per_s = (double)got / t;
    vt_loader_free(L);
    vt_free(x);
    free(lab);
    free(idx);
    return rc;
}
