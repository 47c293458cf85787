/* The one GEMM entry point: oneDNN's dnnl_sgemm or OpenBLAS's cblas_sgemm per call (rule at vt_gemm_choose). */
#include "vitc/gemm.h"

#include <cblas.h>
#include <dnnl.h>
#include <omp.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define VT_X86 1
#endif

/* CPU feature bits, with the OS's support for the registers (XCR0) checked. */
typedef struct {
    int avx, avx2, avx512, avx512_bf16, amx;
} cpu_feats;

static cpu_feats cpu_features(void) {
    cpu_feats f = {0, 0, 0, 0, 0};
#ifdef VT_X86
    unsigned a, b, c, d;
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
    if (lib && lib[0] && strcmp(lib, "auto") != 0) {
        if (strcmp(lib, "openblas") == 0)
            p->force = VT_GEMM_OPENBLAS;
        else if (strcmp(lib, "onednn") == 0)
            p->force = VT_GEMM_ONEDNN;
        else
            return vt_seterr(e, "GEMM library '%s' unknown: expected auto, openblas or onednn (VITC_GEMM)", lib);
    }
    p->cpu = f.avx512 ? VT_ISA_AVX512 : f.avx2 ? VT_ISA_AVX2 : f.avx ? VT_ISA_AVX : VT_ISA_GENERIC;
    p->openblas = openblas_tier(openblas_get_corename());
    p->onednn = onednn_tier(dnnl_get_effective_cpu_isa());
    return 0;
}

vt_gemm_lib vt_gemm_choose(const vt_gemm_plan *p, int threads, int M, int N, int K) {
    (void)threads;
    (void)M;
    (void)N;
    (void)K;
    if (p->force != VT_GEMM_AUTO) return p->force;
    if (p->openblas != p->onednn) return p->openblas > p->onednn ? VT_GEMM_OPENBLAS : VT_GEMM_ONEDNN;
    return VT_GEMM_ONEDNN;
}

void vt_gemm(const vt_gemm_plan *p, int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
             const float *B, int ldb, float beta, float *C, int ldc) {
    const int threads = omp_in_parallel() ? 1 : omp_get_max_threads();
    if (vt_gemm_choose(p, threads, M, N, K) == VT_GEMM_ONEDNN &&
        dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta, C, ldc) == dnnl_success)
        return;
    /* OpenBLAS, or oneDNN refused (it returns an error only for arguments out of range or out of memory) */
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, lda,
                B, ldb, beta, C, ldc);
}

const char *vt_gemm_rule(const vt_gemm_plan *p, char *buf, size_t n) {
    if (p->force != VT_GEMM_AUTO)
        snprintf(buf, n, "every shape: %s (forced)", vt_gemm_lib_name(p->force));
    else if (p->openblas != p->onednn)
        snprintf(buf, n, "every shape: %s (OpenBLAS kernel %s, oneDNN kernel %s)",
                 vt_gemm_lib_name(p->openblas > p->onednn ? VT_GEMM_OPENBLAS : VT_GEMM_ONEDNN),
                 vt_isa_name(p->openblas), vt_isa_name(p->onednn));
    else
        snprintf(buf, n, "every shape: onednn");
    return buf;
}

const char *vt_gemm_lib_name(vt_gemm_lib lib) {
    return lib == VT_GEMM_OPENBLAS ? "openblas" : lib == VT_GEMM_ONEDNN ? "onednn" : "auto";
}

const char *vt_isa_name(vt_isa isa) {
    static const char *const names[] = {"generic (SSE)", "AVX", "AVX2", "AVX-512"};
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
