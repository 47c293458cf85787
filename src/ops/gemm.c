/* The one GEMM entry point: oneDNN's dnnl_sgemm, OpenBLAS's cblas_sgemm or vitc's 64-column kernel (gemm64.c) per
 * call (rule at vt_gemm_choose); the CPU probe and the plan it fills (vt_gemm_plan_init, vt_gemm_plan_bf16), the
 * rule's text and warning (vt_gemm_rule, vt_gemm_warning) and vt_machine_probe. The plan's oneDNN primitives are
 * in gemm_onednn.c, its int8 and bf16 products in gemm_lowp.c. */
#include "vitc/gemm.h"

#include <cblas.h>
#include <dnnl.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "gemm64.h"
#include "gemm_priv.h"
#include "transpose8.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define VT_X86 1
#endif

/* CPU feature bits, with the OS's support for the registers (XCR0) checked. */
typedef struct {
    int avx, avx2, avx512, avx512_bf16, amx, intel;
} cpu_feats;

static cpu_feats cpu_features(void) {
    cpu_feats f = {0, 0, 0, 0, 0, 0};
#ifdef VT_X86
    unsigned a, b, c, d;
    if (__get_cpuid(0, &a, &b, &c, &d)) /* the vendor string, in ebx, edx, ecx: "Genu" "ineI" "ntel" */
        f.intel = b == 0x756e6547u && d == 0x49656e69u && c == 0x6c65746eu;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
    const int osxsave = (c >> 27) & 1, avx = (c >> 28) & 1, fma = (c >> 12) & 1;
    unsigned long long xcr0 = 0;
    if (osxsave) {
        unsigned lo, hi;
        __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
        xcr0 = ((unsigned long long)hi << 32) | lo;
    }
    const int ymm = (xcr0 & 0x6) == 0x6, zmm = ymm && (xcr0 & 0xe0) == 0xe0, tiles = (xcr0 & 0x60000) == 0x60000;
    f.avx = avx && ymm;
    if (__get_cpuid_max(0, NULL) < 7) return f;
    __cpuid_count(7, 0, a, b, c, d);
    f.avx2 = f.avx && fma && ((b >> 5) & 1);
    f.avx512 = zmm && ((b >> 16) & 1);
    f.amx = tiles && ((d >> 24) & 1) && ((d >> 22) & 1); /* AMX-TILE and AMX-BF16 */
    const unsigned sub = a;
    if (sub >= 1) {
        __cpuid_count(7, 1, a, b, c, d);
        f.avx512_bf16 = f.avx512 && ((a >> 5) & 1);
    }
#endif
    return f;
}

/* The ISA tier of an OpenBLAS core name (DYNAMIC_ARCH's list in 0.3.21; later names map the same way). */
static vt_isa openblas_tier(const char *core) {
    static const char *const avx512[] = {"SkylakeX", "Cooperlake", "Sapphirerapids"};
    static const char *const avx2[] = {"Haswell", "Zen"};
    static const char *const avx[] = {"Sandybridge", "Bulldozer", "Piledriver", "Steamroller", "Excavator"};
    for (size_t i = 0; i < sizeof avx512 / sizeof *avx512; i++)
        if (core && strcasecmp(core, avx512[i]) == 0) return VT_ISA_AVX512;
    for (size_t i = 0; i < sizeof avx2 / sizeof *avx2; i++)
        if (core && strcasecmp(core, avx2[i]) == 0) return VT_ISA_AVX2;
    for (size_t i = 0; i < sizeof avx / sizeof *avx; i++)
        if (core && strcasecmp(core, avx[i]) == 0) return VT_ISA_AVX;
    return VT_ISA_GENERIC; /* Prescott, Core2, Nehalem, Atom, Barcelona, ...: SSE kernels */
}

/* The ISA tier of oneDNN's effective ISA (dnnl_cpu_isa_t is a bit set: 0x8/0x20 AVX-512, 0x4 AVX2, 0x2 AVX). */
static vt_isa onednn_tier(dnnl_cpu_isa_t isa) {
    const unsigned v = (unsigned)isa;
    return (v & 0x28) ? VT_ISA_AVX512 : (v & 0x4) ? VT_ISA_AVX2 : (v & 0x2) ? VT_ISA_AVX : VT_ISA_GENERIC;
}

static const char *onednn_isa_name(dnnl_cpu_isa_t isa) {
    switch (isa) {
    case dnnl_cpu_isa_sse41: return "sse41";
    case dnnl_cpu_isa_avx: return "avx";
    case dnnl_cpu_isa_avx2: return "avx2";
    case dnnl_cpu_isa_avx2_vnni: return "avx2_vnni";
    case dnnl_cpu_isa_avx512_mic: return "avx512_mic";
    case dnnl_cpu_isa_avx512_mic_4ops: return "avx512_mic_4ops";
    case dnnl_cpu_isa_avx512_core: return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx";
    default: return "generic";
    }
}

int vt_gemm_plan_init(vt_gemm_plan *p, const char *lib, vt_err *e) {
    const cpu_feats f = cpu_features();
    p->force = VT_GEMM_AUTO;
    p->prims = NULL;
    p->calls_s = NULL;
    if (lib && lib[0] && strcmp(lib, "auto") != 0) {
        if (strcmp(lib, "openblas") == 0)
            p->force = VT_GEMM_OPENBLAS;
        else if (strcmp(lib, "onednn") == 0)
            p->force = VT_GEMM_ONEDNN;
        else
            return vt_seterr_code(e, VT_E_USAGE,
                                  "GEMM library '%s' unknown: expected auto, openblas or onednn (VITC_GEMM)", lib);
    }
    p->cpu = f.avx512 ? VT_ISA_AVX512 : f.avx2 ? VT_ISA_AVX2 : f.avx ? VT_ISA_AVX : VT_ISA_GENERIC;
    p->openblas = openblas_tier(openblas_get_corename());
    p->onednn = onednn_tier(dnnl_get_effective_cpu_isa());
    p->vnni = ((unsigned)dnnl_get_effective_cpu_isa() & 0x440u) != 0; /* the VNNI bits of avx512_core_vnni, avx2_vnni */
    p->amx = ((unsigned)dnnl_get_effective_cpu_isa() & 0x300u) == 0x300u; /* the AMX bits of avx512_core_amx */
    p->intel = f.intel;
    p->tail_n = !f.intel && p->onednn >= VT_ISA_AVX512; /* rule 14 */
    p->pack_w = p->onednn == VT_ISA_AVX2 || p->tail_n;  /* rule 12 */
    p->wt_first = p->tail_n;                            /* rule 15: measured where rule 14 was */
    p->bf16 = 0;
    p->prepack = 1;
    return 0;
}

/* The dispatch rule, measured with bench/gemm_kernels.py on an AMD EPYC (Zen 4, AVX-512, 2 cores; OpenBLAS 0.3.21
 * "Cooperlake", oneDNN 2.6.3 avx512_core_bf16) on 2026-11-23, best of alternated runs (README, "GEMM libraries";
 * GFLOP/s per thread for one-thread calls):
 *  1. A library whose kernels are below the other's ISA tier loses every shape. With OpenBLAS's SSE3 "Prescott"
 *     kernels (Debian's OpenBLAS 0.3.21 on Intel Xeons it does not know; OPENBLAS_CORETYPE=Prescott here) DeiT's
 *     GEMMs ran at 0.3-0.4x of oneDNN (attention tiles 36 vs 104, qkv 78 vs 213 on 2 threads), tiny ones included
 *     (32^3 on one thread: 26 vs 75).
 *  2. Same tier (AVX2 or better): OpenBLAS has less per-call overhead and wins small shapes on one thread (32^3: 107
 *     vs 67, 49x49x32: 71 vs 50), ties near 100^3 (96^3: 115 vs 111) and loses above (128^3: 98 vs 113; attention
 *     tiles 197x64x197: 98 vs 105). On 2 threads OpenBLAS 0.3.21 still runs one thread below ~100^3 while oneDNN
 *     splits from ~64^3 (80^3: 115 vs 173, 96^3: 116 vs 196); below 64^3 both run one thread (48^3: 112 vs 98).
 *     Hence: M*N*K < 2^18, or < 2^20 on one thread (inside our parallel loops) -> OpenBLAS, otherwise oneDNN. With
 *     both capped at AVX2 (OPENBLAS_CORETYPE=Haswell, DNNL_MAX_CPU_ISA=AVX2) the same rule stays within 1-3% of the
 *     best library per shape over DeiT's GEMMs.
 *  3. Same tier below AVX2 (old CPUs, non-x86; not measured): OpenBLAS, vitc's library before oneDNN.
 *  4. Same tier, on more than one thread, a linear layer's forward shape C = A·Bᵀ (ta 0, tb 1) with few rows for its
 *     depth, 16 <= M < K/4: oneDNN 2.6.3 splits it badly over the threads and OpenBLAS is faster (2 threads, GFLOP/s,
 *     OpenBLAS vs oneDNN, M×N×K: 49×768×3072 125 vs 56, 49×384×1536 163 vs 77, 49×768×768 167 vs 127,
 *     128×768×3072 152 vs 96, 196×384×1536 188 vs 155, 16×384×128 67 vs 58; the rule's edge: 49×384×128 146 vs 132,
 *     196×768×768 193 vs 192, 400×384×1536 160 vs 177). oneDNN stays faster on every backward shape (AB and AᵀB) of
 *     the same sizes, and on one thread also on these (49×768×3072 109 vs 119); below 16 rows oneDNN takes another
 *     path and is far faster (1×1536×384 58 vs 13, 12×384×1536 207 vs 65; 16×384×1536 32 vs 115). A batch-1 Swin's
 *     last stages and DeiT's fc2 at batch 1 are such shapes. bench/gemm_kernels.py's "rows" sweep measures them.
 *  5. Same tier, a linear layer's whole forward y = x·wᵀ + b (+ residual or activation) with M <= 2K or K >= 2N:
 *     one oneDNN matmul primitive (brgemm, "brg:avx512_core" here) with the bias and a binary-add or ReLU post-op
 *     fused, made once per graph (vt_gemm_linear_prim), instead of bias rows written first and sgemm with beta 1.
 *     2 threads, GFLOP/s incl. the bias, primitive vs the rules above, M×N×K: 49×768×3072 181 vs 124 (OpenBLAS),
 *     49×768×768 201 vs 167, 196×384×1536 214 vs 153, 196×1152×384 205 vs 194, 784×192×768 210 vs 207,
 *     3136×96×384 223 vs 210, 3152×384×1536 212 vs 178; with a residual 49×768×3072 172 vs 112, 196×384×384 200
 *     vs 186. Larger M over a shallow K loses (its weight operand, wᵀ read in place, is packed per call):
 *     3136×288×96 168 vs 204, 3136×96×96 166 vs 201, 784×576×192 192 vs 203, 3152×1536×384 199 vs 215.
 *     At the AVX2 tier (rule 6's Zen 3, 2026-11-28) every linear's forward takes the primitive: alone (a one-linear
 *     graph, best of 9 alternated bursts, twice) it ties on most shapes and wins on large outputs, where writing the
 *     bias rows first is one more pass over memory (12544×512×64 1.17-1.31×, 50176×384×96 1.04-1.16×, 12544×1024×128
 *     1.01-1.15×), losing 2-8% only with a residual on a shallow K (3136×96×96, 12544×64×64, 3136×64×64); whole
 *     models (both rules' graphs in one process, steps alternated, best of 30-60; the same rule on both sides reads
 *     0.99-1.01) ran PVTv2-b1's batch-1 inference in 0.97-0.98 of the time and the demo ViT's training step
 *     (batch 128) in 0.93-0.97, and no model tried was slower (batch 16: DeiT-T, Swin-T, CSwin-T, Next-ViT-S,
 *     GroupMixFormer-T, PVTv2-b1 0.93-0.99; batch 1: DeiT-T, Swin-T, CSwin-T, FLatten-Swin-T, Next-ViT-S 0.98-1.01).
 *     On Intel's AVX-512 (measured on a Xeon Ice Lake, oneDNN avx512_core_vnni, 2026-11-28) every shape takes it
 *     where its post-ops do the layer's whole epilogue (inference graphs: bias, residual, ReLU or, since
 *     2026-11-29, GELU; not training graphs, whose activation derivative the per-panel path computes in
 *     cache): an eval graph built with and without this case in one process, forwards alternated, 2 threads, time
 *     ratio best of 15 (per-round median): batch 16 DeiT-T 1.10 (1.08), Swin-T 1.04 (1.06), CSwin-T 1.05 (1.04),
 *     Next-ViT-S 1.10 (1.11), PVTv2-b1 1.07 (1.08), GroupMixFormer-T 1.08 (1.05), FLatten-Swin-T 0.99 (1.05),
 *     DeiT-S 0.96 (0.96: its qkv and proj; two identical DeiT-S graphs read 0.96-1.04 in the same test); batch 1
 *     (best of 39) 0.99-1.11, Next-ViT-S 1.11 and PVTv2-b1 1.10. Training graphs with it read 0.93-1.09 per model
 *     in bench/vitc_before_after.py, as often slower as faster. A training linear without an activation (qkv; proj
 *     and fc2 without drop-path) has no derivative to compute, so its post-ops do its whole epilogue there too, and
 *     it takes the case since 2026-12-07: training steps at batch 16 against the build before (Intel Xeon with AMX,
 *     oneDNN avx512_core_amx; bench/vitc_before_after.py, best / per-round median of 4-6 alternated rounds): CSwin-T
 *     1.016-1.040 / 1.024-1.040 in two runs, Swin-T 1.012-1.033 / 1.004-1.032, FLatten-Swin-T 0.979-1.003 /
 *     0.989-1.032, DeiT-T, DeiT-S, PVTv2-b1, Next-ViT-S, GroupMixFormer-T, Refined-ViT-S and DeiT-Ti + hMHSA + cFFN
 *     0.992-1.025 / 0.987-1.021 (level); the bias rows written before sgemm were 3.5% of a CSwin-T step (perf).
 *     AMD's AVX-512 (Zen 4, where the shapes above were measured) keeps the shape rule: there the Intel case read
 *     level in eval graphs (bench/vendor_rules.c, 2026-11-30, per-round medians): batch 16 DeiT-T 1.018, CSwin-T
 *     0.986, Next-ViT-S 0.994, Swin-T 1.002; batch 4 Swin-T 0.984, PVTv2-b1 0.997; batch 1 0.977-0.999 over DeiT-T,
 *     Swin-T, FLatten-Swin-T, PVTv2-b1, Next-ViT-S and GroupMixFormer-T (0.95-0.96 on Swin-T and PVTv2-b1 in an
 *     earlier run).
 *  6. Both libraries at the AVX2 tier (an AMD EPYC Zen 3, 2 cores, OpenBLAS "Zen", oneDNN avx2; 2026-11-26, best of
 *     5 alternated bursts, GFLOP/s OpenBLAS vs oneDNN) rules 2 and 4 do not hold: on one thread oneDNN wins from
 *     32^3 up (32^3 AB 64 vs 81; window-attention tiles 49×49×32 AᵀB 63 vs 76, 56×56×32 ABᵀ 76 vs 94, AᵀB 79 vs 118,
 *     49×32×49 AB 76 vs 109, 98×32×98 AB 95 vs 145, 64^3 100-107 vs 132-142; 16^3 and 16×16×32 still OpenBLAS:
 *     20 vs 16, 34 vs 29), and on 2 threads it wins the rows that rule 4 gave OpenBLAS (49×2304×768 124 vs 152,
 *     49×3072×768 123 vs 148, 16×1000×192 63 vs 99) and few-row products below 2^18 (1×1000×192 5 vs 32,
 *     1×192×576 6 vs 51, 4×96×96 26 vs 39, 8×384×96 29 vs 75; 8^3 4.5 vs 1.5), while square-ish 2-thread shapes
 *     below 2^18 stay erratic for oneDNN (64×32×64 ABᵀ 42 vs 7, 56×32×56 AᵀB 51 vs 13): 1 thread: M*N*K < 2^15 ->
 *     OpenBLAS, else oneDNN; more threads: M <= 8 with M*N*K >= 2^13 -> oneDNN, else rule 2's 2^18. Measured with
 *     bench/gemm_kernels.py and its stdin shapes. (Zen 4 capped at AVX2 kept rule 2 within 1-3%: the rule follows
 *     the tier, which is what the machine reports, not the microarchitecture.)
 *  7. AVX2 tier, more threads, a weight gradient C = Aᵀ·B (ta 1, tb 0; dW = dyᵀ·x of a linear, M = out, N = in
 *     features, K = rows) with M, N >= 128 and (N <= 256 or M·N <= 2^18): OpenBLAS, oneDNN's transposed-A path
 *     being slow on these, worst with power-of-two widths (CSwin's 64/128/256/512). Same Zen 3, 2026-11-26, best of
 *     3 alternated bursts, OpenBLAS vs oneDNN GFLOP/s, M×N×K: 1024×256×3136 134 vs 78, 256×1024×3136 143 vs 62,
 *     192×1024×3136 145 vs 65, 512×512×3136 132 vs 93, 2048×256×3136 154 vs 84, 256×256×3136 134 vs 105,
 *     384×128×3136 101 vs 86, 1536×256×3136 141 vs 113; the edges: 768×128×784 126 vs 145, 512×128×12544 96 vs
 *     105, 384×1024×3136 142 vs 145, 512×1024×3136 149 vs 157; N = 64 stays oneDNN (256×64×3136 122 vs 130,
 *     768×64×3136 85 vs 160), and so does M < 128 (Swin-T's stage-1 fc2, 96×384×50176: 135 vs 164). A sweep of
 *     120 shapes (M 192-2048, N 64-1024, K 784-12544) on stdin to bench/gemm_kernels.c. CSwin-T's stage-3 fc1
 *     weight gradient (1024×256×3136) ran at 64 GFLOP/s before.
 *  8. Intel's AVX-512, more threads, a weight gradient C = Aᵀ·B (as rule 7) over many rows with M >= 2N: K >= 3136
 *     and M >= 512, or K >= 784 with M >= 1024 and N >= 384: OpenBLAS. Intel Xeon Cascade Lake (2 vCPUs, OpenBLAS
 *     "SkylakeX", oneDNN avx512_core_vnni), 2026-11-28, ratio OpenBLAS / oneDNN GFLOP/s over three runs of best-of-4
 *     alternated bursts, M×N×K: 1024×256×3136 1.60-1.61 (CSwin-T stage 3 fc1), 2048×512×784 1.08-1.61,
 *     1024×512×784 1.35-1.44, 1536×384×3136 1.19-1.49, 512×64×50176 1.21-1.34 (PVTv2 stage 1 fc1), 1024×128×12544
 *     1.25-1.34, 512×128×12544 1.23-1.37, 640×320×3136 1.11-1.17, 768×256×3136 1.08-1.09, 1152×384×3152 1.02-1.15,
 *     the edges 576×192×3136 0.89-1.07, 768×192×3152 0.92-0.97; outside the rule oneDNN stays: M < 2N (fc2's
 *     192×768×3136 0.86-0.92, 64×512×12544 0.79), M < 512 (288×96×50176 0.88-0.95, 256×64×3136 0.72-0.80), few rows
 *     (512×128×784 0.84-0.90, 1024×128×784 0.89-1.00, 768×192×197 0.81). Shapes: bench/gemm_kernels.py's "dW"
 *     sweep. Intel only: on AMD's AVX-512 (EPYC Zen 4, 2 vCPUs, OpenBLAS "Cooperlake", oneDNN avx512_core_bf16;
 *     2026-11-30, best of 7 alternated bursts) oneDNN wins these shapes, OpenBLAS vs oneDNN GFLOP/s: 512×64×50176
 *     67-73 vs 172-185, 512×64×3136 78-138 vs 200-203, 1024×128×12544 168 vs 201, 512×128×12544 164 vs 218,
 *     1024×256×3136 156 vs 182, 1536×384×3136 202 vs 225, 1152×384×3152 202 vs 226, 768×192×3152 188 vs 222,
 *     640×320×3136 196 vs 220, ties only over 784 rows (2048×512×784 206 vs 205, 1024×512×784 209 vs 191); training
 *     steps at batch 16 with the rule off, in one process (bench/vendor_rules.c), per-round medians of 8: PVTv2-b1
 *     0.929, DeiT-T 0.951, CSwin-T 0.951, DeiT-S 0.981, Swin-T 1.007 (identical graphs 0.99-1.01).
 *  9. Intel's AVX-512, one thread, attention logits of 32-channel heads: C = A·Bᵀ with K <= 32 and M·N·K >= 2^18
 *     (CSwin's 98-token stripe tiles, hMHSA's DeiT-Ti row tiles of 197 keys; not Swin's 49-token windows): oneDNN
 *     instead of rule 2's OpenBLAS. One-thread tiles are too noisy to rank alone here (98×98×32 107 vs 90 in one
 *     run, 64×197×32 75-100 vs 102-160 in two); whole graphs, the rule off and on in one process, steps alternated,
 *     per-round medians (Intel Xeon Ice Lake, 2026-11-29): CSwin-T training at batch 16 1.040 / 1.038 (two runs),
 *     inference 1.020 / 1.021, batch 1 1.003; DeiT-Ti hMHSA + cFFN inference 1.019 / 1.024, training 1.003;
 *     FLatten-CSwin-T 0.996; Swin-T 1.003 (no shape of it in the rule: the control). Not measured on Cascade Lake.
 *     On AMD's AVX-512 (EPYC Zen 4, 2026-11-30, two runs of 7 bursts, OpenBLAS vs oneDNN) mixed: 98×98×32 161-162 vs
 *     144, 64×197×32 133-159 vs 166-168, 197×197×32 158-173 vs 176: Intel only.
 * 10. AVX-512 (before every rule above but a forced library), products with N = 64 columns: A·B and A·Bᵀ
 *     with M·K >= 2^15, and on Intel weight gradients Aᵀ·B over K >= 3136 rows with M >= 64: vitc's own kernel
 *     (gemm64.c: a 6 × 64 register tile, A read in place, only Bᵀ's 64 rows packed). Xeon Ice Lake (2 vCPUs,
 *     OpenBLAS "SkylakeX", oneDNN avx512_core_vnni), 2026-11-29, bench/gemm_kernels.py (best of 3 × 7 alternated
 *     bursts; GFLOP/s, vitc vs the better library): 2 threads, A·Bᵀ M×64×K 50176×64×64 222 vs 153, ×512 221 vs
 *     151, 3136×64×128 254 vs 166; A·B 50176×64×512 185 vs 156, 3136×64×64 307 vs 223, 50176×64×256 154 vs 165
 *     (the one loss, 0.83-1.13 in other runs); Aᵀ·B 512×64×50176 187 vs 120, 64×64×50176 146 vs 110,
 *     512×64×3136 201 vs 181 (but over 784 rows 0.89-1.01, and K = 197 0.7); one thread inside parallel loops:
 *     DeiT's P·V and dQ of 64-channel heads, 197×64×197, 218-228 vs 167-201, 392×64×392 307 vs 229, while
 *     98×64×98 (228 vs 240) and 49×64×49 (172 vs 188) stay with OpenBLAS. N = 128 as two 64-column halves won only
 *     A·Bᵀ with K >= 512 (12544×128×1024 1.46x) and lost elsewhere (A·B 12544×128×128 0.85x, Aᵀ·B 128×128×12544
 *     0.84x): not in the rule; M = 64 with N > 64 computed as the transposed product lost (64×512×50176 0.94x).
 *     Whole graphs with and without the rule in one process, steps alternated, per-round median (best) of 14:
 *     training at batch 16 FLatten-PVTv2-b1 1.024 (1.043; 1.024 and 1.052 in two more runs), PVTv2-b1 1.046,
 *     PVTv2-b1 + hMHSA + cFFN 1.039, DeiT-T 1.014, DeiT-S 1.016, CSwin-T 0.997 (0.988 in a second run: level);
 *     inference DeiT-T 1.047 at batch 16, 0.992 at batch 1; PVTv2-b1, FLatten-PVTv2-b1, DeiT-S + hMHSA + cFFN
 *     0.995-1.015. On AMD's AVX-512 (EPYC Zen 4, 2026-11-30, same method) A·B and A·Bᵀ only: vitc vs the better
 *     library A·B 3136×64×64 220 vs 200, 50176×64×512 205 vs 176, 50176×64×256 186 vs 185, A·Bᵀ 50176×64×512 203
 *     vs 155, 50176×64×64 217 vs 191, 3136×64×128 214 vs 196, one thread 197×64×197 227-228 vs 209-210, 392×64×392
 *     229 vs 211; but Aᵀ·B lost to oneDNN (512×64×50176 116-126 vs 172-185, 512×64×3136 188-196 vs 200-203,
 *     320×64×50176 168 vs 195; 64×64×50176 won, 188 vs 148). Whole graphs, A·B and A·Bᵀ on the kernel against
 *     not (bench/vendor_rules.c, per-round medians): inference PVTv2-b1 0.971 / 0.977 at batch 16 (two runs) and
 *     0.963 / 0.966 at batch 1, FLatten-PVTv2-b1 0.972, DeiT-T 0.994-1.006; training at batch 16 PVTv2-b1 0.976,
 *     PVTv2-b1 + hMHSA + cFFN 0.996, CSwin-T 1.000, DeiT-T 1.004 / 1.019, FLatten-PVTv2-b1 1.018 (level).
 * 11. Intel's AVX-512, more threads, a weight gradient C = Aᵀ·B over K >= 3136 rows with 96 <= N <= 256, M >= 2N and
 *     2^15 <= M·N <= 2^18 (fc1's and qkv's dW at C = 96 ... 256): oneDNN computes the transpose S = Bᵀ·A (N × M)
 *     into a scratch, added into C transposed in 8×8 register tiles (atb_transposed). oneDNN 2.6.3 runs Aᵀ·B well
 *     with few rows and many columns and badly the other way round (rule 8's reason), and neither library computes
 *     C in the other orientation. Xeon Ice Lake, 2026-11-29, vt_gemm with and without the rule in one process,
 *     calls alternated, per-round medians of 20 (the copy and the transposed add included): 1024×256×3136 1.17
 *     (CSwin-T stage 3 fc1), 768×256×3136 1.14, 1024×128×12544 1.17, 512×128×12544 1.07, 384×128×12544 1.30,
 *     256×128×12544 1.04, 384×96×50176 1.15, 640×160×12544 1.10, the 192-wide 576/768×192×3152/12544 and
 *     512×256×12544 1.00-1.03; 288×96×50176 0.98 and 192×96×12544 0.90 (hence M·N >= 2^15); N = 320-768 mixed
 *     (0.74-1.16 over runs) and M·N above 2^18 unmeasured: outside. Whole training steps at batch 16, the rule off
 *     and on in one process, per-round medians: CSwin-T 1.024 (1.020-1.025 in three earlier runs), DeiT-T 1.051
 *     (1.035, 1.04), GroupMixFormer-S 1.031, FLatten-PVTv2-b1 1.023, Swin-T 1.000, Next-ViT-S 0.992 (its deployed
 *     graph trained: the same GEMM shapes), DeiT-S (no shape in the rule: the control) 0.971. Not measured on
 *     Cascade Lake. On AMD's AVX-512 (EPYC Zen 4, 2026-11-30, best of 7 bursts) oneDNN's direct Aᵀ·B is as fast
 *     or faster (GFLOP/s transposed vs direct: 1024×256×3136 151 vs 182, 384×96×50176 211 vs 221, 512×128×12544
 *     209 vs 218, 576×192×3152 228 vs 222, 256×128×12544 219 vs 188, the rest within 3%): Intel only.
 * 12. AVX2 tier and AMD's AVX-512 (vt_gemm_plan.pack_w; before rule 5's matmul primitive), an inference linear
 *     whose weight is constant (made of parameters), any shape: oneDNN's 1x1 convolution over channels-last rows
 *     (jit_1x1:avx2, jit_1x1:avx512_core) with the layer's own copy of the
 *     weight packed once into the conv's blocked layout (vt_gemm_linear_conv; packed again when the parameters
 *     change, vt_params_changed), where the matmul primitive (gemm:jit) packs the weight at every call. AMD EPYC
 *     Zen 3, 2026-11-29, the layer alone with cold weights (64 MB of copies cycled), best of 7 alternated rounds,
 *     GFLOP/s matmul vs packed conv: Next-ViT-S at batch 1 49×2048×1024 61-104 vs 90-114, 49×2304×768 96 vs 131,
 *     196×512×1024 123 vs 160, 784×512×256 136-151 vs 156-166; DeiT-Ti 197×768×192 118 vs 153, 197×576×192 129 vs
 *     157; batch 16 3152×192×768 112 vs 149, 3136×1536×384 126 vs 141. Packing at every call (what a training step
 *     would need) lost at 49-197 rows (56-85 vs 61-104): training graphs keep rule 5. oneDNN's inner product
 *     (gemm:jit) with a packed weight was no faster than the matmul. Whole eval graphs with and without the rule in
 *     one process, forwards alternated, per-round medians of 5-21: batch 1 DeiT-T 1.17-1.22, DeiT-S 1.21, Swin-T
 *     1.21, CSwin-T 1.25, FLatten-Swin-T 1.09, PVTv2-b1 1.07, Next-ViT-S 1.17-1.19, DeiT-T + hMHSA + cFFN 1.19,
 *     GroupMixFormer-M 1.14, Refined-ViT-S 1.10, SimpleViT-S + MSF-g2 1.14; batch 16 DeiT-T 1.05, DeiT-S 1.06,
 *     Swin-T 1.11, PVTv2-b1 1.10, FLatten-Swin-T 1.27, Next-ViT-S 1.11, SimpleViT-S + MSF-g2 1.01. AMD's AVX-512
 *     (vt_gemm_plan.pack_w; EPYC Zen 4, 2026-12-04, bench/vendor_rules.c --pack, every shape, per-round medians of
 *     11-15 at batch 1, 5-11 at 16): batch 1 Swin-T 1.08, PVTv2-b1 1.07, CSwin-T 1.06, Next-ViT-S 1.08, DeiT-T
 *     1.06, DeiT-S 1.06, the paper models 1.03-1.10 (GroupMixFormer-M 1.03, DeiT-T + hMHSA + cFFN 1.10); batch 16
 *     1.00-1.07 (Next-ViT-S 1.07, CSwin-T 1.05; GroupMixFormer-M, Refined-ViT-S 0.97 in 5 rounds, 1.03 and 1.02
 *     in 11). Intel's AVX-512 (brgemm matmul; a packed-weight matmul was level on the Ice Lake,
 *     docs/benchmarks.md; the packed conv not measured there) keeps rule 5. A bf16 plan takes the rule too, its
 *     products of at least 2^20 MACs on bf16 x and a weight packed to bf16 (Zen 4, 2026-12-04, against rule 5's bf16
 *     primitive on a bf16 copy of the weight made once: batch 1 1.04-1.13, PVTv2-b1 level; batch 16 1.01-1.07;
 *     docs/benchmarks.md, "bf16 inference").
 * 13. AVX2 tier, one thread (inside a parallel loop), a weight gradient C = Aᵀ·B over K >= 784 rows with M >= 384,
 *     N >= 128 and (N <= 256 or M·N <= 2^18): OpenBLAS, as rule 7 on more threads (MSF's grouped projections
 *     compute each group's dW on its own thread). AMD EPYC Zen 3, 2026-11-30, both threads running their own
 *     product, best of 8 alternated rounds, OpenBLAS vs oneDNN GFLOP/s summed, two runs: 768×192×3136 (lda 1536,
 *     SimpleViT-S-MSF-g2's group) 106 / 122 vs 89 / 100, 512×256×3136 106 / 130 vs 88 / 90, 1024×256×3136 85 /
 *     114 vs 53 / 50, 384×192×3136 141 / 84 vs 136 / 76, 768×192×784 84 / 86 vs 66 / 66; oneDNN stays for M < 384
 *     (256×128×3136 132 / 107 vs 140 / 126, 128×128×3136 108 / 109 vs 112 / 116) and N = 384 past 2^18
 *     (1536×384×3136 131 vs 131). SimpleViT-S-MSF-g2's training step at batch 16, the rule off and on in one
 *     process, alternated: its group_linear nodes 637 → 616 ms per step (eight rounds).
 * 14. AMD's AVX-512 (vt_gemm_plan.tail_n), one thread (inside a parallel loop), C = A·Bᵀ whose N <= 512 is not a
 *     multiple of 16 (cFFN's narrow k, PVT's 49 and 50 keys): OpenBLAS, where rule 2 gave oneDNN from 2^20.
 *     oneDNN 2.6.3's brgemm runs the 16-column remainder badly there. EPYC Zen 4, 2026-12-01, bench/gemm_kernels.c,
 *     best of 7 alternated bursts, GFLOP/s of 2 threads each running its own product (the last one: one product on
 *     2 threads), OpenBLAS vs oneDNN, 256-row panels M×N×K: 256×102×768 189 vs
 *     154 (DeiT-Ti's cFFN fc2_u), ×37×512 162 vs 140, ×75×1024 163 vs 145, ×113×512 194 vs 167, ×170×1280 196 vs
 *     174, ×204×1536 197 vs 182, ×227×1024 184 vs 170, ×455×2048 185 vs 175, ×273×2048 187 vs 186; attention
 *     tiles 784×49×64 176 vs 149, 196×50×64 172 vs 143, 197×197×64 183 vs 182, 197×197×32 172 vs 174; N a multiple
 *     of 16 stays (×96×576 201 vs 213, ×384×2304 203 vs 215), as do N = 1000 (64×1000×384 187 vs 209) and more
 *     threads (3152×102×768 114 vs 180). Whole graphs with the rule off and on in one process (bench/vendor_rules.c
 *     --tail-n, per-round medians): DeiT-Ti + hMHSA + cFFN inference at batch 16 1.034-1.043 (three runs), batch 1
 *     1.001, training 0.993; PVTv2-b1 + hMHSA + cFFN 1.010 / 1.007 (eval / train), DeiT-S + hMHSA + cFFN 1.006,
 *     Next-ViT-S + hMHSA + cFFN 0.999, PVTv2-b1 0.996-0.998, FLatten-PVTv2-b1 0.988-0.995, DeiT-Ti 1.007 (level).
 *     Not measured on Intel.
 * 15. AMD's AVX-512 (vt_gemm_plan.wt_first), a linear layer's x·wᵀ that vt_gemm runs (train graphs' linears,
 *     where drop-path or the GELU prologue keep rule 5's primitive out; eval graphs' GELU-prologue linears by row
 *     panels) with K >= N over at least 784 rows: w (N×K) transposed once per forward into the node's scratch
 *     (vt_gemm_transpose), every product then x·(wᵀ) (vt_gemm_wt_first, src/ops/matmul.c). oneDNN 2.6.3's sgemm runs
 *     A·Bᵀ slower than A·B on such shapes; rule 5's matmul primitive does not (it ran 214-218 on the large ones).
 *     EPYC Zen 4, 2026-12-06, bench/gemm_kernels.c, best of 5 alternated bursts, A·Bᵀ vs A·B GFLOP/s, one product on
 *     2 threads: K = 4N 50176×96×384 191 vs 207, 12544×192×768 195 vs 213, 3136×384×1536 178 vs 215, 784×768×3072
 *     163 vs 224, 3136×512×1024 157 vs 192; K = 3N 174-205 vs 188-225; K = 2N 180-204 vs 196-224; 256-row panels
 *     on each of 2 threads (K = 4N, N 96-768) 192-215 vs 214-232; K < N (fc1, qkv) level (197-227 vs 203-226). With
 *     the transpose timed in (an 8×8-tile pass, 0.01-1.2 ms), from 784 rows 1.02-1.35x, K = N included (3136×384×384
 *     1.05); at 196-197 rows 0.67-1.27 (the transpose's thread start-up on 192×192), hence the row floor. Whole
 *     graphs with the rule off and on (bench/vendor_rules.c --wt-first, per-round medians, off / on): training
 *     steps at batch 16 within the host's noise, Swin-T 1.021 then 0.991, CSwin-T 1.017 / 1.006, PVTv2-b1 1.013 /
 *     1.000, FLatten-Swin-T 1.001, DeiT-S 0.986, DeiT-T 0.968 / 0.992 / 1.000, Next-ViT-S 0.999, SimpleViT-S +
 *     MSF-g2 0.999 / 1.001; their forwards alone (16 rounds) Swin-T 1.016, CSwin-T 1.031, DeiT-S 1.021 (the forward
 *     is a third of a step); SimpleViT-S + MSF-g2's eval graph (fc2's GELU prologue) 1.015 / 1.010. One-thread
 *     products (panels) come out bit-identical. Not measured on Intel. */
#define WT_FIRST_M 784 /* rule 15: rows from which transposing the weight first paid on every shape measured */
#define TINY_MNK (1LL << 18)   /* 64^3: below it both libraries run one thread and OpenBLAS is faster */
#define SMALL_MNK (1LL << 20)  /* ~100^3: single-threaded crossover */
#define AVX2_ONE_MNK (1LL << 15) /* rule 6: the one-thread crossover at the AVX2 tier */
#define AVX2_ROWS_MNK (1LL << 13) /* rule 6: few-row products on more threads go to oneDNN from here */
#define AVX2_ATB_MN (1LL << 18)   /* rule 7: AᵀB products with N > 256 go to OpenBLAS up to this M·N */

#define N64_AB_MK (1LL << 15) /* rule 10: A·B / A·Bᵀ with N = 64 from M·K = 2^15 (197 × 197 is 1.3x, 98 × 98 0.9x) */
#define N64_ATB_K 3136       /* rule 10: Aᵀ·B with N = 64 over this many rows */
#define TDW_K 3136            /* rule 11: weight gradients over this many rows */
#define TDW_MN_MIN (1LL << 15) /* rule 11: smaller gradients (192 × 96) lost */
#define TDW_MN_MAX (1LL << 18) /* rule 11: the largest gradient measured (1024 × 256), the transposed copy's size */
#define TAIL_N_MAX 512          /* rule 14: the widest N measured (455 won, 1000 lost) */

/* Whether rule 10 applies on this machine: AVX-512, the kernel built. */
static int n64_on(const vt_gemm_plan *p) { return VT_GEMM64 && p->cpu >= VT_ISA_AVX512; }

/* Rule 10: vitc's 64-column kernel for this shape (Aᵀ·B on Intel only). */
static int n64_rule(const vt_gemm_plan *p, int ta, int tb, int M, int N, int K) {
    if (!n64_on(p) || N != 64) return 0;
    return ta ? p->intel && !tb && K >= N64_ATB_K && M >= 64 : (long long)M * K >= N64_AB_MK;
}

/* Rule 11: a weight gradient AᵀB over many rows with 96 <= N <= 256, M >= 2N and 2^15 <= M·N <= 2^18, on Intel. */
static int tdw_rule(const vt_gemm_plan *p, int M, int N, int K) {
    const long long mn = (long long)M * N;
    return p->intel && K >= TDW_K && N >= 96 && N <= 256 && M >= 2 * N && mn >= TDW_MN_MIN && mn <= TDW_MN_MAX;
}

/* Rule 8: a weight gradient AᵀB over many rows (K) with M >= 2N, on Intel. */
static int wide_dw(const vt_gemm_plan *p, int M, int N, int K) {
    return p->intel && M >= 2 * N && ((K >= 3136 && M >= 512) || (K >= 784 && M >= 1024 && N >= 384));
}

vt_gemm_lib vt_gemm_choose(const vt_gemm_plan *p, int threads, int ta, int tb, int M, int N, int K) {
    if (p->force != VT_GEMM_AUTO) return p->force;
    if (n64_rule(p, ta, tb, M, N, K)) return VT_GEMM_VITC;
    if (p->openblas != p->onednn) return p->openblas > p->onednn ? VT_GEMM_OPENBLAS : VT_GEMM_ONEDNN;
    if (p->onednn < VT_ISA_AVX2) return VT_GEMM_OPENBLAS;
    const long long mnk = (long long)M * N * K;
    if (p->onednn == VT_ISA_AVX2) { /* rule 6 */
        if (threads <= 1 && ta && !tb && M >= 384 && N >= 128 && K >= 784 &&
            (N <= 256 || (long long)M * N <= AVX2_ATB_MN))
            return VT_GEMM_OPENBLAS; /* rule 13 */
        if (threads <= 1) return mnk < AVX2_ONE_MNK ? VT_GEMM_OPENBLAS : VT_GEMM_ONEDNN;
        if (M <= 8 && mnk >= AVX2_ROWS_MNK) return VT_GEMM_ONEDNN;
        if (ta && !tb && M >= 128 && N >= 128 && (N <= 256 || (long long)M * N <= AVX2_ATB_MN))
            return VT_GEMM_OPENBLAS; /* rule 7 */
        return mnk < TINY_MNK ? VT_GEMM_OPENBLAS : VT_GEMM_ONEDNN;
    }
    if (threads > 1 && !ta && tb && M >= 16 && 4LL * M < K) return VT_GEMM_OPENBLAS;
    if (threads > 1 && ta && !tb && tdw_rule(p, M, N, K)) return VT_GEMM_ONEDNN_T;
    if (threads > 1 && ta && !tb && wide_dw(p, M, N, K)) return VT_GEMM_OPENBLAS;
    if (threads <= 1 && p->intel && !ta && tb && K <= 32 && mnk >= TINY_MNK) return VT_GEMM_ONEDNN; /* rule 9 */
    if (threads <= 1 && p->tail_n && !ta && tb && N % 16 != 0 && N <= TAIL_N_MAX) return VT_GEMM_OPENBLAS; /* 14 */
    return mnk < (threads > 1 ? TINY_MNK : SMALL_MNK) ? VT_GEMM_OPENBLAS : VT_GEMM_ONEDNN;
}

/* Rule 11: C (M×N) = alpha·Aᵀ·B + beta·C (A K×M, B K×N) as its transpose S = alpha·Bᵀ·A through oneDNN into a
 * scratch, then C = Sᵀ + beta·C, 8×8 tiles transposed in registers, on all threads (outside parallel regions); 0,
 * or -1 with C untouched (no memory, or oneDNN refused). */
static int atb_transposed(int M, int N, int K, float alpha, const float *A, int lda, const float *B, int ldb,
                          float beta, float *C, int ldc) {
    float *S = malloc(sizeof(float) * (size_t)M * N);
    if (!S) return -1;
    if (dnnl_sgemm('T', 'N', N, M, K, alpha, B, ldb, A, lda, 0.0f, S, M) != dnnl_success) {
        free(S);
        return -1;
    }
    const int add = beta != 0.0f;
#pragma omp parallel for schedule(static)
    for (int i0 = 0; i0 < M; i0 += 8) {
        const int ni = M - i0 < 8 ? M - i0 : 8;
        float *c = C + (size_t)i0 * ldc;
        if (add && beta != 1.0f)
            for (int i = 0; i < ni; i++)
                for (int j = 0; j < N; j++) c[(size_t)i * ldc + j] *= beta;
        for (int j0 = 0; j0 < N; j0 += 8) {
            const int nj = N - j0 < 8 ? N - j0 : 8;
            const float *s = S + (size_t)j0 * M + i0; /* S's rows j0.., columns i0.. */
#if defined(__AVX__)
            if (ni == 8 && nj == 8) {
                transpose8(s, M, c + j0, ldc, add);
                continue;
            }
#endif
            for (int i = 0; i < ni; i++)
                for (int j = 0; j < nj; j++)
                    c[(size_t)i * ldc + j0 + j] = s[(size_t)j * M + i] + (add ? c[(size_t)i * ldc + j0 + j] : 0.0f);
        }
    }
    free(S);
    return 0;
}

/* C = beta·C, or 0 where beta is 0 (C not read), on `threads` threads. */
static void scale_rows(int threads, int M, int N, float beta, float *C, int ldc) {
    if (beta == 1.0f) return;
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1 && (long long)M * N >= 1 << 16)
    for (int i = 0; i < M; i++) {
        float *c = C + (size_t)i * ldc;
        if (beta == 0.0f)
            memset(c, 0, sizeof(float) * (size_t)N);
        else
            for (int j = 0; j < N; j++) c[j] *= beta;
    }
}

static void gemm_run(const vt_gemm_plan *p, int threads, int ta, int tb, int M, int N, int K, float alpha,
                     const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc) {
    /* alpha 0 or K 0 never reaches a library: A and B are not read, as BLAS defines it (oneDNN left C as it was for
     * K 0, also where beta 0 should have zeroed it: found by review, 2026-12-02). Before, a NaN or inf in A or B
     * reached C through oneDNN's matmuls (0·NaN), and the bf16 "gemm:jit" matmul (alpha as its output scale) gave
     * C = NaN at random on 3 threads (67x64x3137, 3 times in about 100 runs, 2026-12-02): its gemm driver, as its
     * source reads, exits on alpha 0 by multiplying C by beta, also the uninitialised per-thread buffers of a
     * split over K, which it then adds into C. */
    if (alpha == 0.0f || K == 0) {
        scale_rows(threads, M, N, beta, C, ldc);
        return;
    }
    if (p->bf16 && omp_get_level() == 0 && (long long)M * N * K >= VT_GEMM_BF16_MNK &&
        vt_gemm_bf16(p, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc) == 0)
        return;
    const vt_gemm_lib lib = vt_gemm_choose(p, threads, ta, tb, M, N, K);
    if (lib == VT_GEMM_VITC && vt_gemm64(threads, ta, tb, M, K, alpha, A, lda, B, ldb, beta, C, ldc) == 0) return;
    if (lib == VT_GEMM_ONEDNN_T && atb_transposed(M, N, K, alpha, A, lda, B, ldb, beta, C, ldc) == 0) return;
    if (lib != VT_GEMM_OPENBLAS &&
        dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta, C, ldc) == dnnl_success)
        return;
    /* OpenBLAS, or oneDNN refused (it returns an error only for arguments out of range or out of memory); vitc's
     * kernel and rule 11's transposed product fall back to oneDNN's direct product only when out of memory */
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, lda,
                B, ldb, beta, C, ldc);
}

void vt_gemm(const vt_gemm_plan *p, int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
             const float *B, int ldb, float beta, float *C, int ldc) {
    const int inside = omp_get_level() > 0, threads = inside ? 1 : omp_get_max_threads(); /* a team of 1 too */
    if (!p->calls_s) {
        gemm_run(p, threads, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
    const double t0 = omp_get_wtime();
    gemm_run(p, threads, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    const double dt = omp_get_wtime() - t0;
    if (inside)
        p->calls_s[(size_t)omp_get_thread_num() * VT_GEMM_PROF_STRIDE] += dt;
    else
        for (int t = 0; t < threads; t++) p->calls_s[(size_t)t * VT_GEMM_PROF_STRIDE] += dt;
}

int vt_gemm_wt_first(const vt_gemm_plan *p, int threads, int M, int rows, int N, int K) {
    return p->wt_first && p->force == VT_GEMM_AUTO && !p->bf16 && M >= WT_FIRST_M && K >= N &&
           vt_gemm_choose(p, threads, 0, 1, rows, N, K) == VT_GEMM_ONEDNN &&
           vt_gemm_choose(p, threads, 0, 0, rows, N, K) == VT_GEMM_ONEDNN;
}

void vt_gemm_transpose(const float *a, int rows, int cols, float *at) {
#pragma omp parallel for schedule(static) if ((long long)rows * cols >= 1 << 14)
    for (int r0 = 0; r0 < rows; r0 += 8) {
        const int nr = rows - r0 < 8 ? rows - r0 : 8;
        for (int c0 = 0; c0 < cols; c0 += 8) {
            const int nc = cols - c0 < 8 ? cols - c0 : 8;
#if defined(__AVX__)
            if (nr == 8 && nc == 8) {
                transpose8(a + (size_t)r0 * cols + c0, cols, at + (size_t)c0 * rows + r0, rows, 0);
                continue;
            }
#endif
            for (int r = 0; r < nr; r++)
                for (int c = 0; c < nc; c++) at[(size_t)(c0 + c) * rows + r0 + r] = a[(size_t)(r0 + r) * cols + c0 + c];
        }
    }
}

int vt_gemm_linear_wanted(const vt_gemm_plan *p, int threads, int M, int N, int K, int fused) {
    (void)threads; /* measured on 2 threads; the primitive threads as sgemm does */
    if (p->bf16) return (long long)M * N * K >= VT_GEMM_BF16_MNK; /* as vt_gemm's bf16 products, bias fused */
    if (p->force != VT_GEMM_AUTO) return p->force == VT_GEMM_ONEDNN;
    if (p->openblas > p->onednn || p->onednn < VT_ISA_AVX2) return 0;
    /* rule 5 (AVX2, and Intel's AVX-512 where the post-ops do the whole epilogue: every shape) */
    return p->onednn == VT_ISA_AVX2 || (fused && p->intel) || (long long)M <= 2LL * K || K >= 2LL * N;
}

int vt_gemm_linear_packs(const vt_gemm_plan *p) {
    return p->force == VT_GEMM_AUTO && p->pack_w && p->prepack && p->onednn >= VT_ISA_AVX2 &&
           p->openblas <= p->onednn;
}

const char *vt_gemm_rule(const vt_gemm_plan *p, char *buf, size_t n) {
    if (p->force != VT_GEMM_AUTO)
        snprintf(buf, n, "every shape: %s (forced by VITC_GEMM)", vt_gemm_lib_name(p->force));
    else if (p->openblas != p->onednn)
        snprintf(buf, n, "every shape: %s (OpenBLAS runs %s kernels, oneDNN %s)",
                 vt_gemm_lib_name(p->openblas > p->onednn ? VT_GEMM_OPENBLAS : VT_GEMM_ONEDNN),
                 vt_isa_name(p->openblas), vt_isa_name(p->onednn));
    else if (p->onednn < VT_ISA_AVX2)
        snprintf(buf, n, "every shape: openblas (both libraries run %s kernels)", vt_isa_name(p->onednn));
    else if (p->onednn == VT_ISA_AVX2)
        snprintf(buf, n, "(AVX2 tier) on 1 thread (inside parallel loops): A^T*B over K >= 784 rows with M >= 384, "
                         "N >= 128 and (N <= 256 or M*N <= 2^18): openblas, M*N*K < 2^15: openblas, else onednn; on "
                         "more: M <= 8 and M*N*K >= 2^13: onednn, A^T*B with M, N >= 128 and (N <= 256 or M*N "
                         "<= 2^18): openblas, else M*N*K < 2^18: openblas, else onednn; a linear's whole forward: "
                         "onednn matmul primitive, bias and residual fused (inference with a constant weight: onednn "
                         "1x1 conv, weight packed once)");
    else
        snprintf(buf, n, "M*N*K < 2^18: openblas; 2^18..2^20: openblas on 1 thread (inside parallel loops), "
                         "onednn on more; >= 2^20: onednn; except A*B^T with 16 <= M < K/4 on more than 1 thread: "
                         "openblas;%s%s a linear's whole forward with M <= 2K or K >= 2N%s: onednn matmul primitive, "
                         "bias and residual fused%s",
                 p->intel ? " A^T*B over >= 3136 rows with 96 <= N <= 256, M >= 2N, 2^15 <= M*N <= 2^18 on more "
                            "than 1 thread: onednn on the transposed product; A^T*B with M >= 2N and (K >= 3136, "
                            "M >= 512 or K >= 784, M >= 1024, N >= 384) on more than 1 thread: openblas;"
                          : "",
                 p->intel    ? " A*B^T with K <= 32 and M*N*K >= 2^18 on 1 thread: onednn;"
                 : p->tail_n ? " A*B^T with N <= 512 not a multiple of 16 on 1 thread: openblas;"
                             : "",
                 p->intel ? " (inference, and training without an activation: every shape)" : "",
                 !p->pack_w     ? ""
                 : p->prepack ? " (inference with a constant weight, every shape: onednn 1x1 conv, weight packed once)"
                              : " (no prepared weight copies: rule 12 off)");
    size_t used = strlen(buf);
    if (p->force == VT_GEMM_AUTO && p->wt_first && !p->bf16 && used < n)
        snprintf(buf + used, n - used, "; a linear's x*w^T run by sgemm (train graphs; inference: GELU-prologue "
                                       "linears by row panels) with K >= N over >= %d rows: w transposed once per "
                                       "forward, then x*(w^T)", WT_FIRST_M);
    used = strlen(buf);
    if (p->force == VT_GEMM_AUTO && n64_on(p) && used < n)
        snprintf(buf + used, n - used, "; before all that, products with N = 64 (A*B and A*B^T with M*K >= 2^15%s): "
                                       "vitc's 64-column kernel",
                 p->intel ? ", A^T*B over >= 3136 rows with M >= 64" : "");
    return buf;
}

int vt_gemm_warning(const vt_gemm_plan *p, const vt_machine *m, char *buf, size_t n) {
    const int ob_low = p->openblas < p->cpu, dn_low = p->onednn < p->cpu;
    if (p->cpu < VT_ISA_AVX2 || (!ob_low && !dn_low)) return 0;
    char what[160], does[160];
    if (ob_low && dn_low)
        snprintf(what, sizeof what, "OpenBLAS (\"%s\", %s) and oneDNN (%s, %s) both run their kernels below",
                 m->openblas_core, vt_isa_name(p->openblas), m->onednn_isa, vt_isa_name(p->onednn));
    else if (ob_low)
        snprintf(what, sizeof what, "OpenBLAS runs its \"%s\" kernels (%s)", m->openblas_core,
                 vt_isa_name(p->openblas));
    else
        snprintf(what, sizeof what, "oneDNN runs its %s kernels (%s)", m->onednn_isa, vt_isa_name(p->onednn));
    if (p->force != VT_GEMM_AUTO)
        snprintf(does, sizeof does, "VITC_GEMM=%s forces that library for every GEMM", vt_gemm_lib_name(p->force));
    else if (p->openblas != p->onednn)
        snprintf(does, sizeof does, "vitc runs every GEMM on %s",
                 p->openblas > p->onednn ? "OpenBLAS" : "oneDNN");
    else
        snprintf(does, sizeof does, "vitc keeps its shape rule (both libraries are at the same level)");
    snprintf(buf, n, "%s on this %s CPU (%s); %s", what, vt_isa_name(p->cpu),
             ob_low ? "OpenBLAS 0.3.21 does not know every recent CPU, and OPENBLAS_CORETYPE overrides its choice"
                    : "DNNL_MAX_CPU_ISA caps oneDNN",
             does);
    return 1;
}

const char *vt_gemm_lib_name(vt_gemm_lib lib) {
    static const char *const names[] = {"auto", "openblas", "onednn", "vitc", "onednn_t"};
    return lib >= VT_GEMM_AUTO && lib <= VT_GEMM_ONEDNN_T ? names[lib] : "auto";
}

const char *vt_isa_name(vt_isa isa) {
    static const char *const names[] = {"generic SSE", "AVX", "AVX2", "AVX-512"};
    return names[isa];
}

void vt_machine_probe(vt_machine *m) {
    const cpu_feats f = cpu_features();
    snprintf(m->cpu_model, sizeof m->cpu_model, "unknown");
    FILE *fp = fopen("/proc/cpuinfo", "r");
    char line[512];
    while (fp && fgets(line, sizeof line, fp)) {
        char *colon = strchr(line, ':');
        if (strncmp(line, "model name", 10) != 0 || !colon) continue;
        colon += 1 + (colon[1] == ' ');
        colon[strcspn(colon, "\n")] = 0;
        snprintf(m->cpu_model, sizeof m->cpu_model, "%s", colon);
        break;
    }
    if (fp) fclose(fp);
    m->avx2 = f.avx2;
    m->avx512 = f.avx512;
    m->avx512_bf16 = f.avx512_bf16;
    m->amx = f.amx;
    m->openblas_core = openblas_get_corename();
    m->onednn_isa = onednn_isa_name(dnnl_get_effective_cpu_isa());
}

int vt_gemm_plan_bf16(vt_gemm_plan *p, vt_err *e) {
    const dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
    if (p->force == VT_GEMM_OPENBLAS)
        return vt_seterr(e, "--dtype bf16 runs its products on oneDNN, but VITC_GEMM forces openblas");
    if (((unsigned)isa & 0x80u) == 0) /* the bf16 bit of avx512_core_bf16 and avx512_core_amx */
        return vt_seterr(e, "--dtype bf16 needs a CPU with native bf16 arithmetic (AVX512_BF16 or AMX); oneDNN runs "
                            "%s kernels here, which have none (bf16 would be emulated, slower than fp32): use fp32",
                         onednn_isa_name(isa));
    if (!vt_gemm_prims_of(p)) /* no memory for the engine's record or for the engine (nothing else fails there) */
        return vt_seterr_code(e, VT_E_NOMEM, "--dtype bf16: out of memory making oneDNN's engine");
    p->bf16 = 1;
    return 0;
}
