/* vt_gemm against the triple-loop reference for each library (forced) and for the automatic rule: every transpose,
 * alpha/beta, odd and tiny shapes, M/N/K = 1, leading dimensions wider than the rows, calls inside an OpenMP
 * parallel region; vitc's 64-column kernel called directly; rule 11's transposed weight gradients; the rule itself;
 * VITC_GEMM; bf16 products (vt_gemm_plan_bf16) against a reference on inputs rounded to bf16, or its refusal. */
#include <dirent.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "../src/ops/gemm64.h"
#include "test.h"
#include "vitc/gemm.h"
#include "vitc/ops.h"

#define PAD 7          /* extra columns of every leading dimension (strided operands, as attention's) */
#define SENTINEL 1e30f /* value of C's padding columns, which vt_gemm must leave alone */

typedef struct {
    int M, N, K;
} dims;

/* Max |C - ref| over the M×N block relative to 1 + max |ref|, or INFINITY when a padding column changed or C is not
 * finite. C starts as NaN when beta == 0 (it must not be read). p NULL: vitc's 64-column kernel (N = 64) on
 * omp_get_max_threads() threads instead of vt_gemm (INFINITY if it declines). */
static double gemm_err(const vt_gemm_plan *p, int ta, int tb, dims d, float alpha, float beta, vt_rng *r) {
    const int M = d.M, N = d.N, K = d.K;
    const int lda = (ta ? M : K) + PAD, ldb = (tb ? K : N) + PAD, ldc = N + PAD;
    const size_t na = (size_t)(ta ? K : M) * lda, nb = (size_t)(tb ? N : K) * ldb, nc = (size_t)M * ldc;
    float *A = malloc(sizeof(float) * na), *B = malloc(sizeof(float) * nb), *C = malloc(sizeof(float) * nc),
          *R = malloc(sizeof(float) * nc);
    double err = INFINITY;
    if (A && B && C && R) {
        for (size_t i = 0; i < na; i++) A[i] = vt_rng_normal(r);
        for (size_t i = 0; i < nb; i++) B[i] = vt_rng_normal(r);
        for (int i = 0; i < M; i++)
            for (int j = 0; j < ldc; j++)
                C[(size_t)i * ldc + j] = j >= N ? SENTINEL : beta == 0.0f ? NAN : vt_rng_normal(r);
        memcpy(R, C, sizeof(float) * nc);
        vt_gemm_ref(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, R, ldc);
        int ok = 1;
        if (p)
            vt_gemm(p, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        else
            ok = N == 64 &&
                 vt_gemm64(omp_get_max_threads(), ta, tb, M, K, alpha, A, lda, B, ldb, beta, C, ldc) == 0;
        double e = 0.0, scale = 1.0;
        for (int i = 0; i < M; i++)
            for (int j = 0; j < ldc; j++) {
                const float c = C[(size_t)i * ldc + j], ref = R[(size_t)i * ldc + j];
                if (j >= N) {
                    ok &= c == SENTINEL;
                } else {
                    ok &= isfinite(c);
                    e = t_worse(e, fabs((double)c - ref));
                    scale = fmax(scale, 1.0 + fabs(ref));
                }
            }
        err = ok ? e / scale : INFINITY;
    }
    free(A);
    free(B);
    free(C);
    free(R);
    return err;
}

static const dims shapes[] = {{1, 1, 1},    {1, 1, 9},    {1, 13, 1},   {11, 1, 1},   {1, 33, 17},
                              {19, 1, 23},  {2, 3, 4},    {5, 7, 3},    {37, 29, 53}, {49, 49, 32},
                              {64, 64, 64}, {197, 64, 83}, {97, 131, 89}, /* above 2^20 MACs: auto picks oneDNN */
                              {301, 64, 131}, {67, 64, 3137}}; /* rule 10 on Intel's AVX-512: vitc's kernel */
static const float ab[][2] = {{1.0f, 0.0f}, {0.7f, 0.5f}, {-1.3f, 1.0f}, {0.25f, -2.0f}, {0.0f, 0.5f}};

static void check_libs(vt_test *T) {
    const char *libs[] = {"openblas", "onednn", "auto"};
    vt_rng r;
    vt_rng_seed(&r, 13);
    for (int l = 0; l < 3; l++) {
        vt_gemm_plan p;
        vt_err e = {0};
        T_CHECK(T, vt_gemm_plan_init(&p, libs[l], &e) == 0, "plan %s: %s", libs[l], e.msg);
        double worst = 0.0;
        for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
            for (int t = 0; t < 4; t++)
                for (size_t k = 0; k < sizeof ab / sizeof *ab; k++) {
                    const double err = gemm_err(&p, t >> 1, t & 1, shapes[s], ab[k][0], ab[k][1], &r);
                    if (!(err < 1e-5))
                        T_CHECK(T, err < 1e-5, "%s ta=%d tb=%d %dx%dx%d alpha %g beta %g: error %g", libs[l], t >> 1,
                                t & 1, shapes[s].M, shapes[s].N, shapes[s].K, ab[k][0], ab[k][1], err);
                    worst = fmax(worst, err);
                }
        T_CHECK(T, worst < 1e-5, "%s: worst relative error %g", libs[l], worst);
    }
}

/* Threads of this process (Linux: entries of /proc/self/task), or -1. */
static int os_threads(void) {
    DIR *d = opendir("/proc/self/task");
    if (!d) return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

/* Each thread of a parallel region runs its own GEMMs (as attention does per head): results as on one thread, and
 * neither library starts threads of its own (both run on the OpenMP pool: no oversubscription). */
static void check_in_parallel(vt_test *T) {
    const char *libs[] = {"openblas", "onednn", "auto"};
    for (int l = 0; l < 3; l++) {
        vt_gemm_plan p;
        vt_err e = {0};
        vt_gemm_plan_init(&p, libs[l], &e);
        double worst = 0.0;
        int inpar = 1;
#pragma omp parallel num_threads(2) reduction(max : worst) reduction(& : inpar)
        {
            vt_rng r;
            vt_rng_seed(&r, 100 + (uint64_t)omp_get_thread_num());
            inpar = omp_get_num_threads() < 2 || omp_in_parallel();
            for (int t = 0; t < 4; t++) {
                worst = fmax(worst, gemm_err(&p, t >> 1, t & 1, (dims){197, 64, 170}, 0.125f, 1.0f, &r));
                worst = fmax(worst, gemm_err(&p, t >> 1, t & 1, (dims){49, 49, 32}, 1.0f, 0.0f, &r));
            }
        }
        T_CHECK(T, inpar, "%s: omp_in_parallel() false inside the region", libs[l]);
        const int nt = os_threads(), most = omp_get_max_threads() > 2 ? omp_get_max_threads() : 2;
        T_CHECK(T, nt <= most, "%s: %d OS threads after GEMMs inside and outside parallel regions, OpenMP allows %d",
                libs[l], nt, most);
        T_CHECK(T, worst < 1e-5, "%s inside omp parallel: worst relative error %g", libs[l], worst);
    }
}

/* vitc's 64-column kernel alone, on 1 and 2 threads: row counts around its 6-row tile (M = 1, 5, 6, 7, 13, 301), K
 * around Aᵀ·B's 128-row passes and the threads' shares (1 to 1,000), every alpha/beta of check_libs; Aᵀ·Bᵀ and a
 * build without AVX-512 decline. */
static void check_gemm64(vt_test *T) {
    static const int Ms[] = {1, 5, 6, 7, 13, 301}, Ks[] = {1, 3, 127, 129, 300, 1000};
    vt_rng r;
    vt_rng_seed(&r, 64);
    float one = 1.0f, b[64] = {0}, c[64];
    const int declined = vt_gemm64(1, 0, 0, 1, 1, 1.0f, &one, 1, b, 64, 0.0f, c, 64);
    if (!VT_GEMM64) {
        T_CHECK(T, declined == -1, "built without AVX-512: the kernel declines");
        return;
    }
    T_CHECK(T, declined == 0, "built with AVX-512: the kernel runs");
    T_CHECK(T, vt_gemm64(1, 1, 1, 1, 1, 1.0f, &one, 1, b, 1, 0.0f, c, 64) == -1, "A^T*B^T declines");
    const int max_threads = omp_get_max_threads();
    for (int th = 1; th <= 2; th++) {
        omp_set_num_threads(th);
        double worst = 0.0;
        for (size_t m = 0; m < sizeof Ms / sizeof *Ms; m++)
            for (size_t k = 0; k < sizeof Ks / sizeof *Ks; k++)
                for (int t = 0; t < 3; t++) /* ta tb: 0 0, 0 1, 1 0 */
                    for (size_t a = 0; a < sizeof ab / sizeof *ab; a++) {
                        const int ta = t == 2, tb = t == 1;
                        const double err = gemm_err(NULL, ta, tb, (dims){Ms[m], 64, Ks[k]}, ab[a][0], ab[a][1], &r);
                        if (!(err < 1e-5))
                            T_CHECK(T, err < 1e-5, "%d threads, ta=%d tb=%d %dx64x%d alpha %g beta %g: error %g", th,
                                    ta, tb, Ms[m], Ks[k], ab[a][0], ab[a][1], err);
                        worst = fmax(worst, err);
                    }
        T_CHECK(T, worst < 1e-5, "64-column kernel on %d threads: worst relative error %g", th, worst);
    }
    omp_set_num_threads(max_threads);
}

/* Rule 11's transposed weight gradient (oneDNN's Bᵀ·A into a scratch, added into C transposed) through vt_gemm with
 * an Intel AVX-512 plan on 2 threads (on any machine: the path needs only oneDNN): sizes around the 8×8 tiles of the
 * transposed add (M, N multiples of 8 and not), every alpha/beta of check_libs. */
static void check_transposed_dw(vt_test *T) {
    static const dims ds[] = {{256, 128, 3136}, {283, 121, 3137}};
    const vt_gemm_plan intel = {.force = VT_GEMM_AUTO, .cpu = VT_ISA_AVX512, .openblas = VT_ISA_AVX512,
                                .onednn = VT_ISA_AVX512, .intel = 1};
    vt_rng r;
    vt_rng_seed(&r, 11);
    const int max_threads = omp_get_max_threads();
    omp_set_num_threads(2);
    double worst = 0.0;
    for (size_t d = 0; d < sizeof ds / sizeof *ds; d++) {
        T_CHECK(T, vt_gemm_choose(&intel, 2, 1, 0, ds[d].M, ds[d].N, ds[d].K) == VT_GEMM_ONEDNN_T,
                "%dx%dx%d on 2 threads: rule 11", ds[d].M, ds[d].N, ds[d].K);
        for (size_t a = 0; a < sizeof ab / sizeof *ab; a++) {
            const double err = gemm_err(&intel, 1, 0, ds[d], ab[a][0], ab[a][1], &r);
            if (!(err < 1e-5))
                T_CHECK(T, err < 1e-5, "A^T*B %dx%dx%d alpha %g beta %g: error %g", ds[d].M, ds[d].N, ds[d].K,
                        ab[a][0], ab[a][1], err);
            worst = fmax(worst, err);
        }
    }
    T_CHECK(T, worst < 1e-5, "transposed weight gradients: worst relative error %g", worst);
    omp_set_num_threads(max_threads);
}

/* vt_gemm_transpose on shapes with and without 8x8 tiles and ragged edges, small (one thread) and large. */
static void check_transpose(vt_test *T) {
    static const int rc[][2] = {{1, 1}, {8, 8}, {13, 21}, {37, 5}, {200, 130}, {768, 200}};
    for (size_t k = 0; k < sizeof rc / sizeof *rc; k++) {
        const int R = rc[k][0], C = rc[k][1];
        float *a = malloc(sizeof(float) * (size_t)R * C), *at = malloc(sizeof(float) * (size_t)R * C);
        int bad = !a || !at;
        for (int i = 0; !bad && i < R * C; i++) a[i] = (float)i + 0.5f;
        if (!bad) vt_gemm_transpose(a, R, C, at);
        for (int r = 0; !bad && r < R; r++)
            for (int c = 0; c < C; c++) bad += at[(size_t)c * R + r] != a[(size_t)r * C + c];
        T_CHECK(T, !bad, "transpose %dx%d: %d elements wrong", R, C, bad);
        free(a);
        free(at);
    }
}

/* The rule: forced libraries, a lagging kernel, the shape classes, untested tiers. */
static void check_rule(vt_test *T) {
    const vt_gemm_lib OB = VT_GEMM_OPENBLAS, DN = VT_GEMM_ONEDNN;
    vt_gemm_plan same = {.force = VT_GEMM_AUTO, .cpu = VT_ISA_AVX512, .openblas = VT_ISA_AVX512,
                         .onednn = VT_ISA_AVX512, .prepack = 1};
    vt_gemm_plan avx2 = {.force = VT_GEMM_AUTO, .cpu = VT_ISA_AVX2, .openblas = VT_ISA_AVX2,
                         .onednn = VT_ISA_AVX2, .prepack = 1};
    vt_gemm_plan in = same;
    in.intel = 1;
    const vt_gemm_lib TD = VT_GEMM_ONEDNN_T;
    vt_gemm_plan amd = same;
    amd.tail_n = 1;
    vt_gemm_plan in2 = avx2;
    in2.intel = 1;
    vt_gemm_plan inf = in;
    inf.force = DN;
    vt_gemm_plan prescott = {.force = VT_GEMM_AUTO, .cpu = VT_ISA_AVX512, .openblas = VT_ISA_GENERIC,
                             .onednn = VT_ISA_AVX512, .prepack = 1};
    vt_gemm_plan dnnl_low = {.force = VT_GEMM_AUTO, .cpu = VT_ISA_AVX2, .openblas = VT_ISA_AVX2,
                             .onednn = VT_ISA_GENERIC, .prepack = 1};
    vt_gemm_plan old = {.force = VT_GEMM_AUTO, .cpu = VT_ISA_AVX, .openblas = VT_ISA_AVX,
                        .onednn = VT_ISA_AVX, .prepack = 1};
    vt_gemm_plan forced = prescott;
    forced.force = OB;
    const struct {
        const vt_gemm_plan *plan;
        int threads, ta, tb, M, N, K;
        vt_gemm_lib want;
        const char *what;
    } cases[] = {
        {&same, 2, 0, 0, 32, 32, 32, OB, "tiny shape on 2 threads: openblas"},
        {&same, 1, 0, 0, 96, 96, 96, OB, "small shape on 1 thread: openblas"},
        {&same, 2, 0, 0, 96, 96, 96, DN, "small shape on 2 threads: onednn"},
        {&same, 1, 0, 0, 197, 197, 64, DN, "attention tile on 1 thread: onednn"},
        {&same, 2, 0, 0, 3152, 576, 192, DN, "large shape: onednn"},
        {&same, 1, 0, 0, 1 << 20, 1 << 20, 1 << 20, DN, "no overflow in M*N*K"},
        /* rule 4: A·Bᵀ with few rows for its depth on more than one thread */
        {&same, 2, 0, 1, 49, 768, 3072, OB, "A*B^T, 49 rows, K 3072, 2 threads: openblas"},
        {&same, 2, 0, 1, 400, 384, 1536, DN, "A*B^T, 400 rows, K 1536: onednn"},
        {&same, 2, 0, 0, 49, 768, 3072, DN, "A*B, 49 rows, K 3072: onednn"},
        {&same, 2, 1, 1, 49, 768, 3072, DN, "A^T*B^T: onednn"},
        {&same, 1, 0, 1, 49, 768, 3072, DN, "A*B^T, 49 rows, K 3072, 1 thread: onednn"},
        {&same, 2, 0, 1, 12, 384, 1536, DN, "A*B^T, 12 rows: onednn"},
        {&same, 2, 0, 1, 16, 384, 1536, OB, "A*B^T, 16 rows, K 1536: openblas"},
        /* rule 6: the AVX2 tier */
        {&avx2, 1, 0, 1, 56, 56, 32, DN, "AVX2: window tile on 1 thread: onednn"},
        {&avx2, 1, 0, 0, 16, 16, 16, OB, "AVX2: 16^3 on 1 thread: openblas"},
        {&avx2, 2, 0, 1, 49, 2304, 768, DN, "AVX2: A*B^T, 49 rows, 2 threads: onednn"},
        {&avx2, 2, 0, 1, 1, 1000, 192, DN, "AVX2: 1 row, 2 threads: onednn"},
        {&avx2, 2, 0, 0, 8, 8, 8, OB, "AVX2: 8^3 on 2 threads: openblas"},
        {&avx2, 2, 0, 1, 64, 32, 64, OB, "AVX2: 64x32x64 on 2 threads: openblas"},
        {&avx2, 2, 0, 0, 96, 96, 96, DN, "AVX2: 96^3 on 2 threads: onednn"},
        /* rule 7: weight gradients A^T*B with N 128..256, or M*N <= 2^18, on more threads */
        {&avx2, 2, 1, 0, 1024, 256, 3136, OB, "AVX2: dW 1024x256x3136: openblas"},
        {&avx2, 2, 1, 0, 256, 1024, 3136, OB, "AVX2: dW 256x1024x3136: openblas"},
        {&avx2, 2, 1, 0, 512, 1024, 3136, DN, "AVX2: dW 512x1024x3136: onednn"},
        {&avx2, 2, 1, 0, 256, 64, 50176, DN, "AVX2: dW with N 64: onednn"},
        {&avx2, 2, 1, 0, 96, 384, 50176, DN, "AVX2: dW with M 96: onednn"},
        {&avx2, 2, 0, 0, 1024, 256, 3136, DN, "AVX2: A*B of the same size: onednn"},
        {&avx2, 1, 1, 0, 1024, 256, 3136, OB, "AVX2: dW on 1 thread: openblas (rule 13)"},
        {&avx2, 1, 1, 0, 256, 128, 3136, DN, "AVX2: dW with M 256 on 1 thread: onednn"},
        {&avx2, 1, 1, 0, 768, 192, 197, DN, "AVX2: dW over 197 rows on 1 thread: onednn"},
        {&avx2, 1, 1, 0, 1536, 384, 3136, DN, "AVX2: dW 1536x384 on 1 thread: onednn"},
        /* rule 8 (Intel's AVX-512): weight gradients over many rows with M >= 2N, on more threads */
        {&in, 2, 1, 0, 1536, 384, 3136, OB, "Intel: dW 1536x384x3136: openblas"},
        {&in, 2, 1, 0, 2048, 512, 784, OB, "Intel: dW 2048x512x784: openblas"},
        {&in, 2, 1, 0, 1024, 128, 784, DN, "Intel: dW, N 128 over 784 rows: onednn"},
        {&in, 2, 1, 0, 192, 768, 3136, DN, "Intel: dW with M < 2N: onednn"},
        {&in, 1, 1, 0, 1536, 384, 3136, DN, "Intel: dW on 1 thread: onednn"},
        {&in, 2, 0, 0, 1536, 384, 3136, DN, "Intel: A*B of the same size: onednn"},
        {&avx2, 2, 1, 0, 512, 64, 50176, DN, "AVX2: no rule 8"},
        /* AMD's AVX-512: oneDNN for all of them */
        {&same, 2, 1, 0, 1536, 384, 3136, DN, "AMD AVX-512: dW 1536x384x3136: onednn"},
        {&same, 2, 1, 0, 1024, 256, 3136, DN, "AMD AVX-512: dW 1024x256x3136: onednn"},
        {&same, 2, 1, 0, 2048, 512, 784, DN, "AMD AVX-512: dW 2048x512x784: onednn"},
        {&same, 2, 1, 0, 384, 96, 50176, DN, "AMD AVX-512: dW with M 384: onednn"},
        /* rule 11 (Intel's AVX-512): weight gradients over >= 3136 rows, 96 <= N <= 256, M >= 2N, M*N in 2^15..2^18 */
        {&in, 2, 1, 0, 1024, 256, 3136, TD, "Intel: dW 1024x256x3136: transposed"},
        {&in, 2, 1, 0, 384, 96, 50176, TD, "Intel: dW 384x96x50176: transposed"},
        {&in, 2, 1, 0, 288, 96, 50176, DN, "Intel: dW with M*N < 2^15: onednn"},
        {&in, 2, 1, 0, 1024, 128, 12544, TD, "Intel: dW 1024x128x12544: transposed"},
        {&in, 2, 1, 0, 1024, 256, 3135, DN, "Intel: dW over 3135 rows: onednn"},
        {&in, 2, 1, 0, 1536, 384, 3136, OB, "Intel: dW with N 384: rule 8"},
        {&in, 2, 1, 0, 2048, 256, 3136, OB, "Intel: dW with M*N 2^19: rule 8"},
        {&in, 2, 1, 0, 255, 128, 12544, DN, "Intel: dW with M < 2N: onednn"},
        {&in, 2, 1, 0, 320, 80, 12544, DN, "Intel: dW with N 80: onednn"},
        {&in, 1, 1, 0, 1024, 256, 3136, DN, "Intel: dW on 1 thread: onednn"},
        {&in, 2, 0, 0, 1024, 256, 3136, DN, "Intel: A*B: onednn"},
        {&in, 2, 1, 1, 1024, 256, 3136, DN, "Intel: A^T*B^T: onednn"},
        /* rule 14 (AMD's AVX-512): one-thread A*B^T whose N is not a multiple of 16, up to 512 columns */
        {&amd, 1, 0, 1, 256, 102, 768, OB, "AMD: cFFN panel 256x102x768: openblas"},
        {&amd, 1, 0, 1, 784, 49, 64, OB, "AMD: PVT tile 784x49x64: openblas"},
        {&amd, 1, 0, 1, 256, 455, 2048, OB, "AMD: N 455: openblas"},
        {&amd, 1, 0, 1, 64, 1000, 384, DN, "AMD: N 1000: onednn"},
        {&amd, 1, 0, 1, 256, 96, 576, DN, "AMD: N 96 (a multiple of 16): onednn"},
        {&amd, 2, 0, 1, 3152, 102, 768, DN, "AMD: N 102 on 2 threads: onednn"},
        {&amd, 1, 0, 0, 256, 102, 768, DN, "AMD: A*B with N 102: onednn"},
        {&amd, 1, 1, 0, 256, 102, 768, DN, "AMD: A^T*B with N 102: onednn"},
        {&same, 1, 0, 1, 256, 102, 768, DN, "rule 14 off: onednn"},
        {&in2, 2, 1, 0, 1024, 256, 3136, OB, "Intel's AVX2: rule 7, not 11"},
        {&inf, 2, 1, 0, 1024, 256, 3136, DN, "Intel, forced onednn: onednn"},
        {&prescott, 1, 0, 0, 4, 4, 4, DN, "generic OpenBLAS kernel: onednn even for tiny shapes"},
        {&dnnl_low, 2, 0, 0, 3152, 576, 192, OB, "generic oneDNN kernel: openblas"},
        {&old, 2, 0, 0, 3152, 576, 192, OB, "same tier below AVX2 (unmeasured): openblas"},
        {&forced, 2, 0, 0, 3152, 576, 192, OB, "forced openblas"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++)
        T_CHECK(T, vt_gemm_choose(cases[c].plan, cases[c].threads, cases[c].ta, cases[c].tb, cases[c].M, cases[c].N,
                                  cases[c].K) == cases[c].want,
                "%s (%dx%dx%d, ta %d, tb %d, %d threads)", cases[c].what, cases[c].M, cases[c].N, cases[c].K,
                cases[c].ta, cases[c].tb, cases[c].threads);
    char buf[256];
    T_CHECK(T, strstr(vt_gemm_rule(&prescott, buf, sizeof buf), "onednn") != NULL, "rule text: %s", buf);
    T_CHECK(T, strstr(vt_gemm_rule(&forced, buf, sizeof buf), "forced") != NULL, "rule text: %s", buf);
    char text[1024];
    T_CHECK(T, strstr(vt_gemm_rule(&in, text, sizeof text), "transposed product") != NULL, "rule text: %s", text);
    T_CHECK(T, !strstr(vt_gemm_rule(&same, text, sizeof text), "transposed"), "rule text (not Intel): %s", text);
    T_CHECK(T, strstr(vt_gemm_rule(&in, text, sizeof text), "A^T*B with M >= 2N") != NULL, "rule 8's text: %s", text);
    T_CHECK(T, !strstr(vt_gemm_rule(&same, text, sizeof text), "M >= 2N"), "no rule 8 (not Intel): %s", text);
    vt_gemm_plan amdp = amd;
    amdp.pack_w = 1;
    T_CHECK(T, strstr(vt_gemm_rule(&amdp, text, sizeof text), "packed once") != NULL, "rule 12's text (AMD): %s", text);
    T_CHECK(T, !strstr(vt_gemm_rule(&same, text, sizeof text), "packed once"), "no rule 12: %s", text);
    amdp.prepack = 0;
    T_CHECK(T, !strstr(vt_gemm_rule(&amdp, text, sizeof text), "packed once") && strstr(text, "rule 12 off"),
            "rule 12 without prepared copies: %s", text);
    T_CHECK(T, strcmp(vt_gemm_lib_name(TD), "onednn_t") == 0, "rule 11's name");
    /* rule 15 (AMD's AVX-512): a train graph's linear with K >= N over >= 784 rows, oneDNN running both forms */
    vt_gemm_plan wt = amd;
    wt.wt_first = 1;
    T_CHECK(T, vt_gemm_wt_first(&wt, 2, 3136, 3136, 384, 1536), "rule 15: Swin-T's stage-3 fc2");
    T_CHECK(T, vt_gemm_wt_first(&wt, 1, 3136, 256, 256, 1024), "rule 15: CSwin-T's fc2 panels on 1 thread");
    T_CHECK(T, vt_gemm_wt_first(&wt, 2, 784, 784, 768, 768), "rule 15: K = N from 784 rows");
    T_CHECK(T, !vt_gemm_wt_first(&wt, 2, 783, 783, 768, 768), "rule 15: not under 784 rows");
    T_CHECK(T, !vt_gemm_wt_first(&wt, 2, 3136, 3136, 1536, 384), "rule 15: not for K < N (fc1)");
    T_CHECK(T, !VT_GEMM64 || !vt_gemm_wt_first(&wt, 2, 3136, 3136, 64, 256),
            "rule 15: not where rule 10's kernel runs (N 64, AVX-512 builds)");
    T_CHECK(T, !vt_gemm_wt_first(&wt, 1, 3136, 256, 102, 768), "rule 15: not where rule 14 gives openblas");
    T_CHECK(T, !vt_gemm_wt_first(&wt, 1, 3136, 32, 32, 32), "rule 15: not for products openblas runs");
    T_CHECK(T, !vt_gemm_wt_first(&amd, 2, 3136, 3136, 384, 1536), "rule 15 off without wt_first");
    vt_gemm_plan wtf = wt;
    wtf.force = DN;
    T_CHECK(T, !vt_gemm_wt_first(&wtf, 2, 3136, 3136, 384, 1536), "rule 15 off when a library is forced");
    wtf = wt;
    wtf.bf16 = 1;
    T_CHECK(T, !vt_gemm_wt_first(&wtf, 2, 3136, 3136, 384, 1536), "rule 15 off in a bf16 plan");
    T_CHECK(T, strstr(vt_gemm_rule(&wt, text, sizeof text), "transposed once per forward") != NULL,
            "rule 15's text: %s", text);
    T_CHECK(T, !strstr(vt_gemm_rule(&amd, text, sizeof text), "transposed once"), "no rule 15: %s", text);
}

/* The linear primitives (rule 5): y = post(x·wᵀ + b) against a double-precision reference for every post-op, with
 * and without bias, on odd shapes (M, N, K = 1 included); a second request returns the same primitive; y starts as
 * NaN (it must not be read). */
static void check_prims(vt_test *T) {
    vt_gemm_plan p;
    vt_err e = {0};
    T_CHECK(T, vt_gemm_plan_init(&p, "onednn", &e) == 0, "plan: %s", e.msg);
    T_CHECK(T, vt_gemm_bf16_weight(&p, 4, 4) == NULL, "no bf16 weight copies on an fp32 plan");
    static const dims ds[] = {{1, 1, 1}, {3, 5, 7}, {49, 96, 200}, {300, 17, 64}};
    vt_rng r;
    vt_rng_seed(&r, 21);
    for (size_t s = 0; s < sizeof ds / sizeof *ds; s++)
        for (int post = VT_GEMM_POST_NONE; post <= VT_GEMM_POST_RELU; post++)
            for (int hb = 0; hb < 2; hb++) {
                const int M = ds[s].M, N = ds[s].N, K = ds[s].K;
                vt_gemm_prim *q = vt_gemm_linear_prim(&p, M, N, K, hb, (vt_gemm_post)post);
                T_CHECK(T, q != NULL, "primitive %dx%dx%d post %d bias %d", M, N, K, post, hb);
                if (!q) continue;
                T_CHECK(T, vt_gemm_linear_prim(&p, M, N, K, hb, (vt_gemm_post)post) == q, "reused");
                float *x = malloc(sizeof(float) * (size_t)M * K), *w = malloc(sizeof(float) * (size_t)N * K),
                      *b = malloc(sizeof(float) * (size_t)N), *res = malloc(sizeof(float) * (size_t)M * N),
                      *y = malloc(sizeof(float) * (size_t)M * N);
                for (int i = 0; i < M * K; i++) x[i] = vt_rng_uniform(&r) * 2.0f - 1.0f;
                for (int i = 0; i < N * K; i++) w[i] = vt_rng_uniform(&r) * 2.0f - 1.0f;
                for (int i = 0; i < N; i++) b[i] = vt_rng_uniform(&r) * 2.0f - 1.0f;
                for (int i = 0; i < M * N; i++) res[i] = vt_rng_uniform(&r) * 2.0f - 1.0f, y[i] = NAN;
                const int rc =
                    vt_gemm_prim_run(q, x, w, hb ? b : NULL, post == VT_GEMM_POST_ADD ? res : NULL, y, NULL, 0);
                double err = 0.0, scale = 1.0;
                for (int i = 0; i < M; i++)
                    for (int o = 0; o < N; o++) {
                        double v = hb ? b[o] : 0.0;
                        for (int k = 0; k < K; k++) v += (double)x[(size_t)i * K + k] * w[(size_t)o * K + k];
                        if (post == VT_GEMM_POST_ADD) v += res[(size_t)i * N + o];
                        if (post == VT_GEMM_POST_RELU) v = v > 0.0 ? v : 0.0;
                        scale = fmax(scale, fabs(v));
                        const double d = fabs(v - y[(size_t)i * N + o]);
                        err = t_worse(err, d);
                    }
                T_CHECK(T, rc == 0 && err / scale < 1e-5, "%dx%dx%d post %d bias %d: run %d, error %g", M, N, K, post,
                        hb, rc, err / scale);
                free(x), free(w), free(b), free(res), free(y);
            }
    vt_gemm_plan_free(&p);
    T_CHECK(T, p.prims == NULL, "freed");
    /* rule 12: the packed 1x1 convolution only where the plan says so (pack_w); the flag as vt_gemm_plan_init sets
     * it (oneDNN's AVX2 tier, AMD's AVX-512) */
    T_CHECK(T, vt_gemm_plan_init(&p, NULL, &e) == 0, "plan: %s", e.msg);
    T_CHECK(T, p.pack_w == (p.onednn == VT_ISA_AVX2 || (!p.intel && p.onednn >= VT_ISA_AVX512)), "pack_w %d (intel %d)",
            p.pack_w, p.intel);
    T_CHECK(T, p.prepack == 1, "a new plan may keep prepared weight copies");
    if (p.onednn >= VT_ISA_AVX2 && p.openblas <= p.onednn) {
        for (int on = 0; on < 2; on++) {
            p.pack_w = on;
            T_CHECK(T, (vt_gemm_linear_conv(&p, 49, 96, 200, 1, VT_GEMM_POST_NONE) != NULL) == on, "pack_w %d", on);
        }
        p.prepack = 0; /* --no-prepack: no packed copy, whatever the CPU's rule */
        T_CHECK(T, vt_gemm_linear_conv(&p, 49, 96, 201, 1, VT_GEMM_POST_NONE) == NULL, "no packed conv without prepack");
        p.prepack = 1;
        p.bf16 = 1; /* below 2^20 MACs a bf16 plan's packed conv is fp32's (the bf16 one: check_bf16) */
        T_CHECK(T, vt_gemm_linear_conv(&p, 49, 96, 200, 1, VT_GEMM_POST_NONE) != NULL, "bf16 plan: small product");
    }
    vt_gemm_plan_free(&p);
    /* rule 5 (an AMD AVX-512 plan, then Intel's: every shape in inference graphs only) */
    vt_gemm_plan same = {.force = VT_GEMM_AUTO, .cpu = VT_ISA_AVX512, .openblas = VT_ISA_AVX512,
                         .onednn = VT_ISA_AVX512};
    for (int infer = 0; infer < 2; infer++) {
        T_CHECK(T, vt_gemm_linear_wanted(&same, 2, 196, 1536, 384, infer), "196x1536x384 (M <= 2K): primitive");
        T_CHECK(T, vt_gemm_linear_wanted(&same, 2, 3136, 96, 384, infer), "3136x96x384 (K >= 2N): primitive");
        T_CHECK(T, !vt_gemm_linear_wanted(&same, 2, 3136, 288, 96, infer), "3136x288x96: sgemm");
    }
    vt_gemm_plan intel = same;
    intel.intel = 1;
    /* rule 9: Intel, one thread, A*B^T with K <= 32 from 2^18 */
    const vt_gemm_lib OB = VT_GEMM_OPENBLAS, DN = VT_GEMM_ONEDNN;
    T_CHECK(T, vt_gemm_choose(&intel, 1, 0, 1, 98, 98, 32) == DN, "Intel, 98x98x32 A*B^T on 1 thread: onednn");
    T_CHECK(T, vt_gemm_choose(&same, 1, 0, 1, 98, 98, 32) == OB, "not Intel, 98x98x32 A*B^T on 1 thread: openblas");
    T_CHECK(T, vt_gemm_choose(&intel, 1, 0, 1, 49, 49, 32) == OB, "Intel, 49x49x32 A*B^T (below 2^18): openblas");
    T_CHECK(T, vt_gemm_choose(&intel, 1, 0, 1, 98, 98, 64) == OB, "Intel, 98x98x64 A*B^T (K 64): openblas");
    T_CHECK(T, vt_gemm_choose(&intel, 1, 0, 0, 98, 98, 32) == OB, "Intel, 98x98x32 A*B on 1 thread: openblas");
    T_CHECK(T, vt_gemm_linear_wanted(&intel, 2, 3136, 288, 96, 1), "Intel, inference, 3136x288x96: primitive");
    T_CHECK(T, !vt_gemm_linear_wanted(&intel, 2, 3136, 288, 96, 0),
            "Intel, training with an activation, 3136x288x96: sgemm");
    vt_gemm_plan avx2 = {.force = VT_GEMM_AUTO, .cpu = VT_ISA_AVX2, .openblas = VT_ISA_AVX2, .onednn = VT_ISA_AVX2};
    T_CHECK(T, vt_gemm_linear_wanted(&avx2, 2, 3136, 288, 96, 0), "AVX2 tier, 3136x288x96: primitive");
    vt_gemm_plan ob = intel, low = intel;
    ob.force = VT_GEMM_OPENBLAS;
    low.onednn = VT_ISA_AVX;
    low.openblas = VT_ISA_AVX;
    T_CHECK(T, !vt_gemm_linear_wanted(&ob, 2, 196, 1536, 384, 1), "forced openblas: no primitive");
    T_CHECK(T, !vt_gemm_linear_wanted(&low, 2, 196, 1536, 384, 1), "below AVX2: no primitive");
    /* rule 10: AVX-512, 64 columns, where the kernel is built (else the rules above) */
    const vt_gemm_lib V = VT_GEMM64 ? VT_GEMM_VITC : DN;
    T_CHECK(T, vt_gemm_choose(&intel, 2, 0, 0, 50176, 64, 512) == V, "Intel, 50176x64x512 A*B: vitc if built");
    T_CHECK(T, vt_gemm_choose(&intel, 2, 0, 1, 50176, 64, 512) == V, "Intel, 50176x64x512 A*B^T: vitc if built");
    T_CHECK(T, vt_gemm_choose(&intel, 1, 0, 0, 197, 64, 197) == V, "Intel, 197x64x197 on 1 thread: vitc if built");
    T_CHECK(T, vt_gemm_choose(&intel, 2, 1, 0, 512, 64, 50176) == (VT_GEMM64 ? VT_GEMM_VITC : OB),
            "Intel, dW 512x64x50176: vitc if built");
    T_CHECK(T, vt_gemm_choose(&intel, 1, 0, 0, 98, 64, 98) == OB, "Intel, 98x64x98 (M*K < 2^15): openblas");
    T_CHECK(T, vt_gemm_choose(&intel, 2, 1, 0, 512, 64, 784) == DN, "Intel, dW over 784 rows: onednn");
    T_CHECK(T, vt_gemm_choose(&intel, 2, 1, 0, 32, 64, 50176) == DN, "Intel, dW with M 32: onednn");
    T_CHECK(T, vt_gemm_choose(&intel, 2, 1, 0, 64, 512, 50176) == DN, "Intel, dW with M 64, N 512: onednn");
    T_CHECK(T, vt_gemm_choose(&intel, 2, 1, 1, 512, 64, 50176) == DN, "Intel, A^T*B^T: onednn");
    T_CHECK(T, vt_gemm_choose(&intel, 2, 0, 0, 50176, 96, 512) == DN, "Intel, 96 columns: onednn");
    /* AMD's AVX-512: A*B and A*B^T only */
    T_CHECK(T, vt_gemm_choose(&same, 2, 0, 0, 50176, 64, 512) == V, "AMD, 50176x64x512 A*B: vitc if built");
    T_CHECK(T, vt_gemm_choose(&same, 2, 0, 1, 3136, 64, 128) == V, "AMD, 3136x64x128 A*B^T: vitc if built");
    T_CHECK(T, vt_gemm_choose(&same, 1, 0, 0, 197, 64, 197) == V, "AMD, 197x64x197 on 1 thread: vitc if built");
    T_CHECK(T, vt_gemm_choose(&same, 2, 1, 0, 512, 64, 50176) == DN, "AMD, dW 512x64x50176: onednn");
    T_CHECK(T, vt_gemm_choose(&ob, 2, 0, 0, 50176, 64, 512) == OB, "forced openblas: openblas");
    vt_gemm_plan intel2 = intel;
    intel2.cpu = intel2.openblas = intel2.onednn = VT_ISA_AVX2;
    T_CHECK(T, vt_gemm_choose(&intel2, 2, 0, 0, 50176, 64, 512) == DN, "Intel's AVX2: onednn");
    char buf[1024];
    T_CHECK(T, (strstr(vt_gemm_rule(&intel, buf, sizeof buf), "64-column") != NULL) == VT_GEMM64, "rule text: %s",
            buf);
    T_CHECK(T, (strstr(vt_gemm_rule(&same, buf, sizeof buf), "64-column") != NULL) == VT_GEMM64 &&
                   !strstr(buf, "M >= 64"), "rule text (AMD): %s", buf);
    T_CHECK(T, strcmp(vt_gemm_lib_name(VT_GEMM_VITC), "vitc") == 0, "the kernel's name");
}

/* vt_gemm_plan_init's names; VITC_GEMM reaches the graph, and a bad value is an error of vt_graph_new. */
static void check_override(vt_test *T) {
    vt_gemm_plan p;
    vt_err e = {0};
    T_CHECK(T, vt_gemm_plan_init(&p, NULL, &e) == 0 && p.force == VT_GEMM_AUTO, "NULL: auto");
    T_CHECK(T, vt_gemm_plan_init(&p, "onednn", &e) == 0 && p.force == VT_GEMM_ONEDNN, "onednn");
    T_CHECK(T, vt_gemm_plan_init(&p, "openblas", &e) == 0 && p.force == VT_GEMM_OPENBLAS, "openblas");
    T_CHECK(T, vt_gemm_plan_init(&p, "mkl", &e) == -1 && strstr(e.msg, "'mkl'") && strstr(e.msg, "VITC_GEMM") &&
                   e.code == VT_E_USAGE,
            "bad name, a usage error (%d): %s", e.code, e.msg);
    const char *old = getenv("VITC_GEMM");
    char *saved = old ? strdup(old) : NULL;
    vt_err ge = {0};
    vt_params *P = vt_params_new(&ge);
    setenv("VITC_GEMM", "openblas", 1);
    vt_graph *g = vt_graph_new(P, 0, &ge);
    T_CHECK(T, g && g->gemm.force == VT_GEMM_OPENBLAS, "VITC_GEMM=openblas reaches the graph");
    vt_graph_free(g);
    setenv("VITC_GEMM", "fast", 1);
    g = vt_graph_new(P, 0, &ge);
    T_CHECK(T, !g && strstr(ge.msg, "'fast'") && ge.code == VT_E_USAGE, "VITC_GEMM=fast (%d): %s", ge.code, ge.msg);
    if (saved)
        setenv("VITC_GEMM", saved, 1);
    else
        unsetenv("VITC_GEMM");
    free(saved);
    vt_params_free(P);
}

/* The machine description names both libraries' kernels. */
static void check_machine(vt_test *T) {
    vt_machine m;
    vt_machine_probe(&m);
    T_CHECK(T, m.cpu_model[0] && m.openblas_core && m.openblas_core[0] && m.onednn_isa && m.onednn_isa[0],
            "machine: '%s', '%s', '%s'", m.cpu_model, m.openblas_core ? m.openblas_core : "(null)",
            m.onednn_isa ? m.onednn_isa : "(null)");
}

/* x rounded to bf16's 8 significant bits, nearest even (the current rounding mode), computed as the test's own
 * arithmetic rather than gemm_lowp.c's bit trick. */
static float bf16_round(float x) {
    if (!isfinite(x) || x == 0.0f) return x;
    int e;
    const float m = frexpf(x, &e); /* |m| in [0.5, 1) */
    return ldexpf(nearbyintf(ldexpf(m, 8)), e - 8);
}

/* vt_gemm on a bf16 plan: max |C - ref| relative to 1 + max |ref| (as gemm_err) against the product of A and B
 * rounded to bf16 (*exact: against the product of the unrounded A and B), C's padding untouched. */
static double bf16_err(const vt_gemm_plan *p, int ta, int tb, dims d, float alpha, float beta, vt_rng *r,
                       double *exact) {
    const int M = d.M, N = d.N, K = d.K;
    const int lda = (ta ? M : K) + PAD, ldb = (tb ? K : N) + PAD, ldc = N + PAD;
    const size_t na = (size_t)(ta ? K : M) * lda, nb = (size_t)(tb ? N : K) * ldb, nc = (size_t)M * ldc;
    float *A = malloc(sizeof(float) * na), *B = malloc(sizeof(float) * nb), *C = malloc(sizeof(float) * nc),
          *R = malloc(sizeof(float) * nc), *X = malloc(sizeof(float) * nc), *Ar = malloc(sizeof(float) * na),
          *Br = malloc(sizeof(float) * nb);
    double err = INFINITY;
    *exact = INFINITY;
    if (A && B && C && R && X && Ar && Br) {
        for (size_t i = 0; i < na; i++) Ar[i] = bf16_round(A[i] = vt_rng_normal(r));
        for (size_t i = 0; i < nb; i++) Br[i] = bf16_round(B[i] = vt_rng_normal(r));
        for (int i = 0; i < M; i++)
            for (int j = 0; j < ldc; j++)
                C[(size_t)i * ldc + j] = j >= N ? SENTINEL : beta == 0.0f ? NAN : vt_rng_normal(r);
        memcpy(R, C, sizeof(float) * nc);
        memcpy(X, C, sizeof(float) * nc);
        vt_gemm_ref(ta, tb, M, N, K, alpha, Ar, lda, Br, ldb, beta, R, ldc);
        vt_gemm_ref(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, X, ldc);
        vt_gemm(p, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        int ok = 1;
        double e = 0.0, ex = 0.0, scale = 1.0;
        for (int i = 0; i < M; i++)
            for (int j = 0; j < ldc; j++) {
                const size_t k = (size_t)i * ldc + j;
                if (j >= N) {
                    ok &= C[k] == SENTINEL;
                    continue;
                }
                ok &= isfinite(C[k]);
                e = t_worse(e, fabs((double)C[k] - R[k]));
                ex = t_worse(ex, fabs((double)C[k] - X[k]));
                scale = fmax(scale, 1.0 + fabs(R[k]));
            }
        err = ok ? e / scale : INFINITY;
        *exact = ok ? ex / scale : INFINITY;
    }
    free(A);
    free(B);
    free(C);
    free(R);
    free(X);
    free(Ar);
    free(Br);
    return err;
}

/* A bf16 linear layer's output y (M, N) of x (M, K), w (N, K), b (N), r (NULL or (M, N), post ADD) and post against
 * the product of the bf16-rounded x and w in double (within 1e-5 of the scale) and not equal to fp32's (past 1e-4). */
static void bf16_linear_check(vt_test *T, const char *what, int post, int rc, int M, int N, int K, const float *x,
                              const float *w, const float *b, const float *r, const float *y) {
    double err = 0.0, ex = 0.0, scale = 1.0;
    for (int i = 0; i < M; i++)
        for (int o = 0; o < N; o++) {
            double v = b[o], v32 = b[o];
            for (int k = 0; k < K; k++) {
                v += (double)bf16_round(x[i * K + k]) * bf16_round(w[o * K + k]);
                v32 += (double)x[i * K + k] * w[o * K + k];
            }
            if (r) v += r[i * N + o], v32 += r[i * N + o];
            if (post == VT_GEMM_POST_RELU) v = fmax(v, 0.0), v32 = fmax(v32, 0.0);
            scale = fmax(scale, fabs(v));
            const double d = fabs(v - y[i * N + o]);
            err = t_worse(err, d);
            ex = t_worse(ex, fabs(v32 - y[i * N + o]));
        }
    T_CHECK(T, rc == 0 && err / scale < 1e-5 && ex / scale > 1e-4,
            "bf16 %s post %d: run %d, error %g against the bf16-rounded product, %g against fp32's", what, post, rc,
            err / scale, ex / scale);
}

/* A bf16 primitive q run on a weight's bf16 copy (vt_gemm_bf16_weight) gives y0, q's result converting w at the run,
 * bit for bit; after w changes in place the copy is kept until a run is told it is stale, then follows the new w.
 * Leaves w as it found it. */
static void bf16_weight_copy(vt_test *T, vt_gemm_plan *p, vt_gemm_prim *q, int M, int N, int K, const float *x,
                             float *w, const float *b, const float *r, const float *y0) {
    vt_gemm_bfw *wc = vt_gemm_bf16_weight(p, N, K);
    float *y = malloc(sizeof(float) * (size_t)M * N * 3), *y1 = y + (size_t)M * N, *yn = y1 + (size_t)M * N;
    if (!wc || !y) {
        T_CHECK(T, 0, "bf16 weight copy %dx%d: made (%p)", N, K, (void *)wc);
        free(y);
        return;
    }
    const size_t bytes = sizeof(float) * (size_t)M * N;
    int rc = vt_gemm_prim_run(q, x, w, b, r, y, wc, 0) | vt_gemm_prim_run(q, x, w, b, r, y, wc, 0);
    T_CHECK(T, rc == 0 && !memcmp(y, y0, bytes), "bf16 weight copy: the same product as converting w at each run");
    const float w0 = w[0];
    w[0] = w0 + 1.0f; /* row 0 changes: output column 0 */
    rc = vt_gemm_prim_run(q, x, w, b, r, y1, NULL, 0);
    rc |= vt_gemm_prim_run(q, x, w, b, r, y, wc, 0);
    T_CHECK(T, rc == 0 && !memcmp(y, y0, bytes) && memcmp(y1, y0, bytes),
            "bf16 weight copy: kept while the run is not told the weight changed");
    rc = vt_gemm_prim_run(q, x, w, b, r, yn, wc, 1) | vt_gemm_prim_run(q, x, w, b, r, y, wc, 0);
    T_CHECK(T, rc == 0 && !memcmp(yn, y1, bytes) && !memcmp(y, y1, bytes),
            "bf16 weight copy: converted again when stale, then kept");
    w[0] = w0;
    free(y);
}

/* A bf16 inference graph's linear layer keeps its weight's bf16 copy current: after vt_params_init, and after
 * values written directly and vt_params_changed, the next forward equals x·wᵀ + b of the new weights on inputs
 * rounded to bf16, computed here in double precision. */
static void bf16_graph_weights(vt_test *T) {
    vt_err e = {0};
    vt_params *P = vt_params_new(&e);
    vt_graph *g = P ? vt_graph_new(P, 0, &e) : NULL;
    if (!g || vt_gemm_plan_bf16(&g->gemm, &e)) {
        T_CHECK(T, 0, "bf16 graph: %s", e.msg);
        if (g) vt_graph_free(g);
        vt_params_free(P);
        return;
    }
    const int R = 256, Ci = 64, Co = 64, xs[2] = {R, Ci}, ws[2] = {Co, Ci}; /* 2^20 MACs: a bf16 product */
    vt_tensor *x = vt_input(g, "x", 2, xs);
    vt_tensor *w = vt_param(g, "w", 2, ws, (vt_init){VT_INIT_NORMAL, 1.0f});
    vt_tensor *b = vt_param(g, "b", 1, &Co, (vt_init){VT_INIT_NORMAL, 1.0f});
    vt_tensor *y = vt_linear(g, x, w, b);
    vt_graph_output(g, y);
    const int ok = vt_graph_finalize(g, &e) == 0;
    T_CHECK(T, ok, "bf16 linear graph: %s", e.msg);
    vt_rng rng;
    vt_rng_seed(&rng, 5);
    for (int64_t i = 0; ok && i < x->numel; i++) x->data[i] = vt_rng_normal(&rng);
    for (int round = 0; ok && round < 3; round++) {
        if (round < 2) {
            vt_params_init(P, 7 + (uint64_t)round);
        } else {
            for (int64_t i = 0; i < w->numel; i++) w->data[i] = -0.5f * w->data[i] + 0.25f;
            vt_params_changed(P);
        }
        const long long runs = vt_gemm_bf16_runs(&g->gemm);
        vt_graph_forward(g);
        double err = 0.0, scale = 1.0;
        for (int i = 0; i < R; i++)
            for (int o = 0; o < Co; o++) {
                double s = b->data[o];
                for (int k = 0; k < Ci; k++) s += (double)bf16_round(x->data[i * Ci + k]) * bf16_round(w->data[o * Ci + k]);
                err = t_worse(err, fabs(y->data[i * Co + o] - s));
                scale = fmax(scale, fabs(s));
            }
        const vt_node *nd = g->nodes[y->prod];
        T_CHECK(T, err / scale <= 1e-5 && vt_gemm_bf16_runs(&g->gemm) == runs + 1,
                "bf16 linear (%s) after weight change %d off by %g (%lld bf16 products)",
                nd->kern ? nd->kern->name : "reference", round, err / scale, vt_gemm_bf16_runs(&g->gemm) - runs);
    }
    vt_graph_free(g);
    vt_params_free(P);
}

/* --dtype bf16's products: where oneDNN has a native bf16 kernel, products of at least VT_GEMM_BF16_MNK MACs outside
 * parallel regions equal the product of the bf16-rounded inputs summed in fp32 (and differ from the fp32 product:
 * the bf16 kernel ran), smaller ones and those inside a parallel region stay fp32, a NaN propagates; elsewhere the
 * plan refuses bf16 with an error that says why. Forced OpenBLAS refuses it everywhere. */
static void check_bf16(vt_test *T) {
    vt_machine m;
    vt_machine_probe(&m);
    const int native = (m.avx512_bf16 || m.amx) && m.onednn_isa &&
                       (strstr(m.onednn_isa, "bf16") || strstr(m.onednn_isa, "amx"));
    vt_gemm_plan p, forced;
    vt_err e = {0}, ef = {0};
    T_CHECK(T, vt_gemm_plan_init(&p, "auto", &e) == 0, "plan: %s", e.msg);
    T_CHECK(T, vt_gemm_plan_init(&forced, "openblas", &ef) == 0 && vt_gemm_plan_bf16(&forced, &ef) == -1 &&
                   strstr(ef.msg, "VITC_GEMM") && !forced.bf16,
            "bf16 with a forced library refused: '%s'", ef.msg);
    vt_gemm_plan_free(&forced);
    const int rc = vt_gemm_plan_bf16(&p, &e);
    if (!native) {
        T_CHECK(T, rc == -1 && strstr(e.msg, "native bf16") && !p.bf16, "no native bf16 (oneDNN %s): refused: '%s'",
                m.onednn_isa ? m.onednn_isa : "?", e.msg);
        fprintf(stderr, "note [gemm]: bf16 products not run: oneDNN has no native bf16 kernel on this CPU (%s)\n",
                m.onednn_isa ? m.onednn_isa : "?");
        vt_gemm_plan_free(&p);
        return;
    }
    T_CHECK(T, rc == 0 && p.bf16, "native bf16 (oneDNN %s): plan accepts bf16: '%s'", m.onednn_isa, e.msg);
    vt_rng r;
    vt_rng_seed(&r, 29);
    static const dims big[] = {{97, 131, 89}, {301, 64, 131}, {67, 64, 3137}, {1040, 9, 113}, {5, 700, 300}};
    double worst = 0.0, least_exact = INFINITY;
    for (size_t s = 0; s < sizeof big / sizeof *big; s++)
        for (int t = 0; t < 4; t++)
            for (size_t k = 0; k < sizeof ab / sizeof *ab; k++) {
                double ex;
                const double err = bf16_err(&p, t >> 1, t & 1, big[s], ab[k][0], ab[k][1], &r, &ex);
                if (!(err < 1e-5))
                    T_CHECK(T, err < 1e-5, "bf16 ta=%d tb=%d %dx%dx%d alpha %g beta %g: error %g", t >> 1, t & 1,
                            big[s].M, big[s].N, big[s].K, ab[k][0], ab[k][1], err);
                worst = fmax(worst, err);
                if (ab[k][0] != 0.0f) least_exact = fmin(least_exact, ex);
            }
    T_CHECK(T, worst < 1e-5, "bf16 products: worst relative error %g against the bf16-rounded inputs' product", worst);
    T_CHECK(T, least_exact > 1e-4, "bf16 products differ from the fp32 product (the bf16 kernel ran): least %g",
            least_exact);
    double ex, small = 0.0;
    for (int t = 0; t < 4; t++) {
        bf16_err(&p, t >> 1, t & 1, (dims){37, 29, 53}, 1.0f, 0.0f, &r, &ex);
        small = fmax(small, ex);
    }
    T_CHECK(T, small < 1e-5, "products below 2^20 MACs stay fp32: error %g against the fp32 product", small);
    double inpar = 0.0;
#pragma omp parallel num_threads(2) reduction(max : inpar)
    {
        vt_rng rt;
        vt_rng_seed(&rt, 31 + (unsigned)omp_get_thread_num());
        bf16_err(&p, 0, 1, (dims){97, 131, 89}, 1.0f, 0.0f, &rt, &inpar);
    }
    T_CHECK(T, inpar < 1e-5, "products inside a parallel region stay fp32: error %g against the fp32 product", inpar);
    /* a linear layer's fused forward primitive on the bf16 plan: bias and residual or ReLU after the bf16 product */
    T_CHECK(T, vt_gemm_linear_wanted(&p, 2, 197, 160, 96, 0) && !vt_gemm_linear_wanted(&p, 2, 100, 100, 100, 0),
            "bf16 plan: the fused primitive from 2^20 MACs on");
    for (int post = VT_GEMM_POST_NONE; post <= VT_GEMM_POST_RELU; post++) {
        const int pm = 197, pn = 160, pk = 96;
        vt_gemm_prim *q = vt_gemm_linear_prim(&p, pm, pn, pk, 1, (vt_gemm_post)post);
        float *x = malloc(sizeof(float) * pm * pk), *w = malloc(sizeof(float) * pn * pk), *b = malloc(sizeof(float) * pn),
              *res = malloc(sizeof(float) * pm * pn), *y = malloc(sizeof(float) * pm * pn);
        if (!q || !x || !w || !b || !res || !y) {
            T_CHECK(T, 0, "bf16 primitive post %d: made (%p) with its buffers", post, (void *)q);
            free(x), free(w), free(b), free(res), free(y);
            continue;
        }
        for (int i = 0; i < pm * pk; i++) x[i] = vt_rng_normal(&r);
        for (int i = 0; i < pn * pk; i++) w[i] = vt_rng_normal(&r);
        for (int i = 0; i < pn; i++) b[i] = vt_rng_normal(&r);
        for (int i = 0; i < pm * pn; i++) res[i] = vt_rng_normal(&r), y[i] = NAN;
        const float *rr = post == VT_GEMM_POST_ADD ? res : NULL;
        int rc = vt_gemm_prim_run(q, x, w, b, rr, y, NULL, 0);
        if (rc == 0) bf16_weight_copy(T, &p, q, pm, pn, pk, x, w, b, rr, y);
        bf16_linear_check(T, "primitive", post, rc, pm, pn, pk, x, w, b, rr, y);
        /* rule 12 where the plan packs (AMD's AVX-512): the 1x1 convolution on a weight packed to bf16 once */
        vt_gemm_conv *cq = p.pack_w ? vt_gemm_linear_conv(&p, pm, pn, pk, 1, (vt_gemm_post)post) : NULL;
        T_CHECK(T, !p.pack_w || cq, "bf16 plan that packs: a packed bf16 conv for post %d", post);
        if (cq) {
            const long long runs = vt_gemm_bf16_runs(&p);
            for (int i = 0; i < pm * pn; i++) y[i] = NAN;
            rc = vt_gemm_linear_conv_run(cq, x, w, b, rr, y, 0);
            T_CHECK(T, vt_gemm_bf16_runs(&p) == runs + 1, "packed bf16 conv: counted as a bf16 product");
            bf16_linear_check(T, "packed conv", post, rc, pm, pn, pk, x, w, b, rr, y);
        }
        free(x), free(w), free(b), free(res), free(y);
    }
    const int M = 128, N = 96, K = 128; /* 1.5M MACs */
    float *A = calloc((size_t)M * K, sizeof(float)), *B = calloc((size_t)K * N, sizeof(float)),
          *C = calloc((size_t)M * N, sizeof(float));
    if (A && B && C) {
        for (int i = 0; i < K * N; i++) B[i] = 1.0f;
        A[5 * K + 3] = NAN;
        A[9 * K + 1] = INFINITY;
        A[11 * K] = 3.4e38f; /* past bf16's largest finite value after rounding: inf */
        vt_gemm(&p, 0, 0, M, N, K, 1.0f, A, K, B, N, 0.0f, C, N);
        int ok = 1;
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) {
                const float c = C[(size_t)i * N + j];
                ok &= i == 5 ? isnan(c) : i == 9 || i == 11 ? isinf(c) && c > 0 : c == 0.0f;
            }
        T_CHECK(T, ok, "bf16: a NaN input row gives NaN, an infinite one and one that rounds past bf16's range inf");
    }
    free(A);
    free(B);
    free(C);
    vt_gemm_plan_free(&p);
    bf16_graph_weights(T);
}

/* alpha 0 or K 0, as BLAS: C = beta·C (0 where beta is 0, C's NaN not read), A and B not read (NaN and inf in them
 * do not reach C), padding untouched; on every library, the bf16 plan where it runs, and on 3 threads, where
 * oneDNN's own driver split the long K of 67x64x3137 and returned C = NaN at random (see gemm_run). K 0 runs with
 * alpha 1 (A and B then hold nothing to read); oneDNN left C as it was there. */
static void check_alpha0(vt_test *T) {
    static const dims sh[] = {{5, 7, 3}, {67, 64, 3137}, {301, 64, 131}, {300, 300, 0}};
    const char *libs[] = {"openblas", "onednn", "auto", "bf16"};
    const int threads0 = omp_get_max_threads(), tcount[] = {threads0, 3};
    int bad = 0, runs = 0;
    for (int l = 0; l < 4; l++) {
        vt_gemm_plan p;
        vt_err e = {0};
        if (vt_gemm_plan_init(&p, l == 3 ? "auto" : libs[l], &e) || (l == 3 && vt_gemm_plan_bf16(&p, &e))) {
            T_CHECK(T, l == 3, "plan %s: %s", libs[l], e.msg);
            vt_gemm_plan_free(&p);
            continue;
        }
        for (size_t s = 0; s < sizeof sh / sizeof *sh; s++)
            for (int t = 0; t < 4; t++)
                for (int th = 0; th < 2; th++)
                    for (int b = 0; b < 2; b++) {
                        const int ta = t >> 1, tb = t & 1, M = sh[s].M, N = sh[s].N, K = sh[s].K;
                        const int lda = (ta ? M : K) + PAD, ldb = (tb ? K : N) + PAD, ldc = N + PAD;
                        const size_t na = (size_t)(ta ? K : M) * lda, nb = (size_t)(tb ? N : K) * ldb,
                                     nc = (size_t)M * ldc;
                        const float beta = b ? 0.5f : 0.0f;
                        float *A = malloc(sizeof(float) * (na + 1)), *B = malloc(sizeof(float) * (nb + 1)),
                              *C = malloc(sizeof(float) * nc); /* + 1: K 0 leaves A or B empty */
                        if (!A || !B || !C) {
                            bad++;
                        } else {
                            for (size_t i = 0; i < na; i++) A[i] = i % 7 == 3 ? NAN : i % 11 == 5 ? INFINITY : 1.0f;
                            for (size_t i = 0; i < nb; i++) B[i] = i % 5 == 1 ? -INFINITY : 2.0f;
                            for (size_t i = 0; i < nc; i++) C[i] = (int)(i % ldc) >= N ? SENTINEL : b ? (float)(i % 9) : NAN;
                            omp_set_num_threads(tcount[th]);
                            vt_gemm(&p, ta, tb, M, N, K, K ? 0.0f : 1.0f, A, lda, B, ldb, beta, C, ldc);
                            omp_set_num_threads(threads0);
                            int ok = 1;
                            for (size_t i = 0; i < nc; i++) {
                                const int j = (int)(i % ldc);
                                ok &= C[i] == (j >= N ? SENTINEL : b ? 0.5f * (float)(i % 9) : 0.0f);
                            }
                            if (!ok && bad < 4)
                                T_CHECK(T, ok, "%s alpha %d beta %g ta=%d tb=%d %dx%dx%d on %d threads: C != beta*C",
                                        libs[l], !K, beta, ta, tb, M, N, K, tcount[th]);
                            bad += !ok;
                        }
                        runs++;
                        free(A);
                        free(B);
                        free(C);
                    }
        vt_gemm_plan_free(&p);
    }
    T_CHECK(T, bad == 0 && runs >= 3 * 64, "alpha 0 or K 0 gives beta*C and reads neither A nor B: %d of %d wrong",
            bad, runs);
}

void test_gemm(vt_test *T) {
    check_libs(T);
    check_in_parallel(T);
    check_gemm64(T);
    check_transposed_dw(T);
    check_rule(T);
    check_transpose(T);
    check_prims(T);
    check_override(T);
    check_machine(T);
    check_bf16(T);
    check_alpha0(T);
}
