/* vitc bench: the throughput of a model's inference or training step (and of an input pipeline), with the machine's
 * GEMM peaks. */
#include <omp.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "vitc/gemm.h"
#include "vitc/loader.h"
#include "vitc/model.h"
#include "vitc/predict.h"
#include "vitc/train.h"

#include "cli.h"

/* The CPU's ISA as one phrase, e.g. "AVX-512 + AVX512_BF16". */
static const char *isa_phrase(const vt_machine *m, char *buf, size_t n) {
    snprintf(buf, n, "%s%s%s", m->avx512 ? "AVX-512" : m->avx2 ? "AVX2" : "below AVX2",
             m->avx512_bf16 ? " + AVX512_BF16" : "", m->amx ? " + AMX" : "");
    return buf;
}

/* Whether other processes and the hypervisor took more of the machine during the timed steps than vitc's `threads`
 * left free, by more than half a CPU (the counts' quarter-CPU resolution and as much of slack), with the warning in
 * w. */
static int contention(const vt_bench_result *r, int threads, char *w, size_t n) {
    const long online = sysconf(_SC_NPROCESSORS_ONLN);
    const double spare = online > threads ? (double)(online - threads) : 0.0;
    if (r->other_cpus < 0.0 || online < 1 || r->other_cpus + r->steal_cpus <= spare + 0.5) return 0;
    char stolen[96] = "";
    if (r->steal_cpus >= 0.05) snprintf(stolen, sizeof stolen, " and the hypervisor took %.2f more", r->steal_cpus);
    snprintf(w, n, "during the timed steps other processes ran on %.2f of this machine's %ld CPUs%s beside vitc's %d "
             "threads: they shared cores, so these img/s read low; compare runs taken together (alternated), or "
             "rerun on a quiet machine", r->other_cpus, online, stolen, threads);
    return 1;
}

/* A CPU count of the JSON object, or null where unknown (below 0). */
static void json_cpus(const char *key, double v) {
    if (v < 0.0)
        printf(", \"%s\": null", key);
    else
        printf(", \"%s\": %.3f", key, v);
}

/* `"key": GFLOP/s, ` of a peak measured (> 0), else `"key": null, `. */
static void json_peak(const char *key, double v) {
    if (v > 0.0)
        printf("\"%s\": %.2f, ", key, v);
    else
        printf("\"%s\": null, ", key);
}

int cmd_bench(opts *o) {
    if (given(o, "--workers") && !o->data)
        return refuse("bench", "--workers sets the input pipeline's threads, which only --data DIR runs");
    if (o->train_form && (o->train || o->data))
        return refuse("bench", "--train-form chooses the form of an inference benchmark; a training step (%s) always "
                      "runs the training form", o->train ? "--train" : "--data");
    if (o->no_prepack && (o->train || o->data))
        return refuse("bench", "--no-prepack concerns inference graphs; a training step (%s) keeps no prepared weight "
                      "copies", o->train ? "--train" : "--data");
    if (given(o, "--drop-path") && !o->train && !o->data)
        return refuse("bench", "--drop-path acts only in a training step: add --train (inference has no stochastic "
                      "depth)");
    vt_model_cfg c;
    const int mc = model_cfg(o, &c); /* 2: a malformed list option */
    if (mc) return mc;
    int B = o->batch > 0 ? o->batch : 1, iters = o->iters > 0 ? o->iters : 10;
    if (o->csv && (o->json || o->profile)) return refuse("bench", "--csv excludes --json and --profile");
    if (c.arch.int8 && (o->train || o->data))
        return refuse("bench", "--dtype int8 is for inference, but %s benchmarks a training step",
                      o->train ? "--train" : "--data (which implies --train)");
    warn_busy_cores();
    vt_bench_result r;
    vt_err e = {0};
    double pipe = 0.0; /* --data: the input pipeline's img/s alone, measured before the (training) step */
    const int workers = o->workers > 0 ? o->workers : vt_loader_default_workers();
    if (o->data) {
        vt_data d;
        o->train = 1;
        if (vt_data_open(&c, o->data, 1, 1, NULL, 0, 0, &d, &e)) return die("%s", e.msg);
        const int rc = vt_bench_input(&d, B, workers, iters > 20 ? iters : 20, &pipe, &e);
        vt_data_close(&d);
        if (rc) return die("%s", e.msg);
    }
    /* the --profile table: on stdout, or on stderr with --json (stdout holds the JSON object alone) */
    FILE *prof = o->profile ? (o->json ? stderr : stdout) : NULL;
    const int brc = vt_bench(&c, B, o->train, iters, prof, stderr, &r, &e);
    if (brc) return die("%s", e.msg);
    if (o->data && !o->json && !o->csv)
        printf("input pipeline (%s, batch %d, %d workers): %.1f img/s alone; training step %.1f img/s: %s\n", o->data,
               B, workers, pipe, r.img_per_s,
               pipe < r.img_per_s ? "input-bound (the GEMMs would wait for data)"
                                  : "not input-bound (the pipeline is faster than the step, if it gets the cores)");
    /* the options that made this model from the named one: a benchmark row of a variant names it */
    char mopts[1024], label[1300];
    if (given_options(o, RECORDED_OPTS "--train-form --no-prepack ", mopts, sizeof mopts))
        snprintf(mopts, sizeof mopts, "...");
    char lowwarn[400];
    const vt_dtype_use use = {r.linears, r.int8_linears, r.bf16_runs};
    const int fell_back = vt_dtype_fallback(&c, use, lowwarn, sizeof lowwarn); /* asked for int8 or bf16, ran fp32 */
    snprintf(label, sizeof label, "%s%s%s%s", c.name, mopts[0] ? " " : "", mopts, fell_back ? " (ran fp32)" : "");
    if (o->csv) { /* timm benchmark.py's columns: --bench infer, or --bench train with --train */
        if (fell_back) fprintf(stderr, "vitc bench: WARNING: %s\n", lowwarn); /* and the row's label says so */
        const char *m = o->train ? "train" : "infer";
        printf("model,%s_samples_per_sec,%s_step_time,%s_batch_size,%s_img_size,%sparam_count\n", m, m, m, m,
               o->train ? "" : "infer_gmacs,");
        csv_str(label);
        char size[24];
        printf(",%.2f,%.3f,%d,%s,", r.img_per_s, r.ms_per_iter, B, vt_arch_size_text(&c.arch, size, sizeof size));
        if (!o->train) printf("%.6f,", r.gmacs_per_img);
        printf("%.6f\n", r.params / 1e6);
        return 0;
    }
    const vt_machine *m = &r.machine;
    char rule[1024], warn[512], isa[64], busy[400];
    const int contended = contention(&r, omp_get_max_threads(), busy, sizeof busy);
    const int warned = vt_gemm_warning(&r.gemm, m, warn, sizeof warn);
    const int q8 = c.arch.int8 && !fell_back, b16 = c.arch.bf16 && !fell_back; /* what ran */
    vt_gemm_rule(&r.gemm, rule, sizeof rule);
    if (o->json) {
        printf("{\"model\": \"%s\", \"dtype\": \"%s\", \"batch\": %d, \"train\": %d, \"threads\": %d, \"img_per_s\": %.3f, "
               "\"ms_per_iter\": %.3f, \"ms_best_iter\": %.3f, \"params\": %lld, \"gmacs_per_img\": %.6f, "
               "\"gmacs_run_per_img\": %.6f, "
               "\"gflops\": %.2f, "
               "\"sgemm_gflops\": %.2f, \"sgemm_gflops_openblas\": %.2f, \"sgemm_gflops_onednn\": %.2f, "
               "\"arena_mib\": %.1f, \"peak_rss_mib\": %.1f, \"weight_copies_mib\": %.1f, ",
               c.name, dtype_label(&c, !fell_back), B,
               o->train, omp_get_max_threads(), r.img_per_s, r.ms_per_iter,
               r.ms_best_iter, (long long)r.params, r.gmacs_per_img, r.gmacs_run_per_img,
               r.gflops,
               r.sgemm_gflops, r.sgemm_openblas, r.sgemm_onednn, r.arena_mib, r.peak_rss_mib, r.weight_copies_mib);
        json_peak("bf16_gemm_gflops", r.bf16_gflops); /* measured with --dtype bf16 alone */
        json_peak("int8_gemm_gflops", r.int8_gflops);
        char size[24];
        printf("\"img_size\": \"%s\", ", vt_arch_size_text(&c.arch, size, sizeof size));
        if (o->data) printf("\"pipeline_img_per_s\": %.3f, \"workers\": %d, ", pipe, workers);
        printf("\"model_options\": ");
        json_str(mopts);
        printf(", \"cpu_model\": ");
        json_str(m->cpu_model);
        printf(", \"isa\": {\"avx2\": %s, \"avx512\": %s, \"avx512_bf16\": %s, \"amx\": %s}, \"openblas_core\": ",
               m->avx2 ? "true" : "false", m->avx512 ? "true" : "false", m->avx512_bf16 ? "true" : "false",
               m->amx ? "true" : "false");
        json_str(m->openblas_core);
        printf(", \"onednn_isa\": ");
        json_str(m->onednn_isa);
        printf(", \"linears\": %d, \"int8_linears\": %d, \"bf16_products\": %lld", r.linears, r.int8_linears,
               r.bf16_runs);
        json_cpus("other_cpus", r.other_cpus);
        json_cpus("steal_cpus", r.steal_cpus);
        printf(", \"contention_warning\": ");
        if (contended)
            json_str(busy);
        else
            printf("null");
        if (o->profile)
            printf(", \"time_by_kind\": {\"gemm\": %.4f, \"fused\": %.4f, \"fused_gemm_calls\": %.4f, \"other\": %.4f}",
                   r.by_kind[VT_OP_GEMM], r.by_kind[VT_OP_FUSED], r.fused_gemm, r.by_kind[VT_OP_OTHER]);
        printf(", \"gemm_lib\": \"%s\", \"gemm_rule\": ", vt_gemm_lib_name(r.gemm.force));
        json_str(rule);
        printf(", \"gemm_warning\": ");
        if (warned)
            json_str(warn);
        else
            printf("null");
        printf("}\n");
        return 0;
    }
    /* % of the peak of the arithmetic its GEMMs run: the bf16 product's, the int8 layer's, else sgemm's */
    const int bf = b16 && r.bf16_gflops > 0.0, i8 = q8 && r.int8_gflops > 0.0;
    const double peak = bf ? r.bf16_gflops : i8 ? r.int8_gflops : r.sgemm_gflops;
    char run[64] = ""; /* the MACs gflops counts, where the graph runs fewer than the model's summary */
    if (r.gmacs_run_per_img < 0.9995 * r.gmacs_per_img)
        snprintf(run, sizeof run, " (%.4g run)", r.gmacs_run_per_img);
    if (o->train && strcmp(c.arch.ffn, "cffn") == 0) /* a training step runs cFFN's training form, `list` counts the
                                                       * deployed one */
        snprintf(run + strlen(run), sizeof run - strlen(run), " (training form)");
    printf("%s%s%s%s %s batch %d, %d threads: %.2f img/s (%.4g ms/iter, fastest %.4g), %.4g GMACs/img%s, %.1f GFLOP/s "
           "achieved (%.0f%% of %s peak %.1f GFLOP/s), arena %.1f MiB, peak RSS %.1f MiB (weight copies %.1f MiB)\n",
           c.name, mopts[0] ? " [" : "", mopts, mopts[0] ? "]" : "",
           o->train ? b16 ? "bf16 train" : "train"
           : q8     ? "int8 inference"
           : b16    ? "bf16 inference"
                    : "inference",
           B,
           omp_get_max_threads(),
           r.img_per_s, r.ms_per_iter, r.ms_best_iter, r.gmacs_per_img, run, r.gflops,
           100 * r.gflops / peak, bf ? "the bf16 GEMM" : i8 ? "the int8 GEMM" : "sgemm", peak, r.arena_mib,
           r.peak_rss_mib, r.weight_copies_mib);
    printf("cpu: %s, %s\n", m->cpu_model, isa_phrase(m, isa, sizeof isa));
    printf("gemm kernels: OpenBLAS \"%s\" (%s), oneDNN %s (%s); sgemm 1024^3: OpenBLAS %.1f, oneDNN %.1f GFLOP/s\n",
           m->openblas_core, vt_isa_name(r.gemm.openblas), m->onednn_isa, vt_isa_name(r.gemm.onednn), r.sgemm_openblas,
           r.sgemm_onednn);
    printf("gemm dispatch (%s): %s\n", vt_gemm_lib_name(r.gemm.force), rule);
    if (b16)
        printf("bf16: products of >= 2^20 multiply-adds outside the attention kernels ran on bf16 inputs summed in "
               "fp32; bf16 GEMM 1024^3 (inputs converted, oneDNN bf16 matmul): %.1f GFLOP/s, %.2fx the sgemm\n",
               r.bf16_gflops, r.bf16_gflops / r.sgemm_gflops);
    if (fell_back)
        printf("WARNING: %s\n", lowwarn);
    else if (q8)
        printf("int8: %d of %d linear layers run the int8 kernel (the others: shapes where fp32 measured faster, or "
               "GroupMixFormer's qkv, which has no int8 kernel); "
               "int8 linear 1024^3 (input quantised each run, oneDNN u8 x s8 matmul): %.1f GFLOP/s, %.2fx the sgemm\n",
               r.int8_linears, r.linears, r.int8_gflops, r.int8_gflops / r.sgemm_gflops);
    if (warned) printf("WARNING: %s\n", warn);
    if (contended) printf("WARNING: %s\n", busy);
    return 0;
}
