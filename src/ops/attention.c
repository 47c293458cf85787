/* Fused multi-head softmax attention straight from packed projections, equal to the plain composition
 * split_heads → matmul(q, kᵀ)·scale (+ bias + mask) → softmax → matmul(·, v) → merge_heads (checked in
 * tests/test_ops_attention.c and tests/test_ops_attention_ex.c), without the head copies: each
 * (batch, head) runs two strided sgemms over an N×M tile that stays in cache.
 * Queries come from q (B, N, Lq) at channels q_off + h·dh; keys and values from kv (B, M, Lkv) at k_off and v_off
 * (kv = q for self-attention on a packed qkv). Optional additive terms before the softmax: a differentiable bias
 * (H, N, M) shared by the batch or (B, H, N, M) (Swin's relative position bias), and a constant mask (nW, N, M),
 * batch entry b using mask[b % nW] (Swin's shifted windows; no gradient).
 * MSF mode (Kobayashi 2024, spec-msf §2): the logits are Gaussian-kernel ones, scale·(q·kᵀ − 0.5‖k‖²) (the ‖k_j‖²
 * term is a per-key shift of every row), and the PROBE p (in q at p_off) is subtracted after attention:
 * o = softmax·v − p.
 * Threads: parallel over (batch, head) when there are at least as many pairs as threads (in forward, a pair's query
 * rows in chunks where the pairs alone would leave threads idle); otherwise the pairs run one after another with
 * multi-threaded sgemms and the softmax rows split over the threads.
 * Memory: train graphs keep the probabilities (save[0], B·H·N·M floats) only for small maps, M <= dh, where they
 * are at most a third of a packed qkv and recomputing them was a third of the attention's backward time (the demo's
 * ViT, 17 tokens, dh 32). Otherwise backward recomputes each (batch, head)'s N×M probabilities from q, k
 * (and bias, mask) into a per-thread tile with the forward's own code, so they are the forward's values; the
 * B·H·N·M floats it would otherwise keep from forward to backward were 15% of DeiT-S's training arena, and the
 * recomputation is one N×M×dh GEMM per head (about 1% of a DeiT-S training step's multiply-adds).
 * Few keys (M <= 112) on AVX-512: the logits of a tile of query rows stay in registers from the q·kᵀ product to the
 * stored probabilities (forward), and likewise dO·vᵀ to the logits' gradient (backward): vitc's own tile kernel, see
 * sk_tile for why not a library's.
 * Export (vt_attn_args.probs, graphs built with export_maps, for `vitc attention`): forward computes each head's
 * probabilities straight into a (B, H, N, M) second output instead of its scratch tile; off by default. */
#include <math.h>
#include <omp.h>

#include "sktile.h"
#include "mathfn.h"
#include "vitc/gemm.h"
#include "vitc/ops.h"

/* Input slots: in[0] = q, then kv (if separate), bias, mask (each slot -1 when absent).
 * Nothing saved. Work: forward: per thread M key norms and an N×M probability tile; backward: per thread the same
 * two, an N×M dS tile and M column sums, then (shared bias with a gradient) one H×N×M partial bias gradient per
 * thread. With the small-key tiles each thread's forward and backward part ends with a dh × SK_MAX key block. */
typedef struct {
    int B, N, M, H, dh, nt, msf;
    int ldq, ldkv, q_off, k_off, v_off, p_off;
    int kv_in, bias_in, mask_in;
    int bias_batched, bias_grad, nW;
    int keep_p; /* train graphs with M <= dh: forward keeps the probabilities in save[0] for backward */
    int nr;     /* forward: query-row chunks per (batch, head) pair, so that the pairs' chunks spread evenly */
    int small;  /* the small-key tiles run (sk_on): each thread's scratch also holds a transposed key block */
    float scale;
    const vt_gemm_plan *gemm; /* the graph's GEMM dispatch */
    int S, s;                 /* vt_stripe_attention: an S × S grid, stripes s wide (B images, N = M = S·s), */
    int hpu;                  /* hpu of a stripe's H/2 heads per unit of work; in[1], in[2] the LePE weight, bias */
} attn_p;

/* Per-(batch, head) views of the inputs and the output (bias, mask and o NULL when absent or not wanted). */
typedef struct {
    const float *q, *k, *v, *bias, *mask;
    float *o;
} head_io;

static head_io head_ptrs(const attn_p *a, const float *qd, const float *kvd, const float *bias, const float *mask,
                         float *out, int b, int h) {
    const size_t NM = (size_t)a->N * a->M, hc = (size_t)h * a->dh;
    const float *qb = qd + (size_t)b * a->N * a->ldq, *kb = kvd + (size_t)b * a->M * a->ldkv;
    head_io io = {qb + a->q_off + hc, kb + a->k_off + hc, kb + a->v_off + hc, NULL, NULL, NULL};
    if (bias) io.bias = bias + (a->bias_batched ? (size_t)b * a->H + h : (size_t)h) * NM;
    if (mask) io.mask = mask + (size_t)(b % a->nW) * NM;
    if (out) io.o = out + (size_t)b * a->N * a->H * a->dh + hc;
    return io;
}

#if defined(__AVX512F__)
#define SK_MAX VT_SK_MAX /* small-key tiles: at most this many keys, seven 16-float vectors per row */
#define SK_NV VT_SK_NV /* key vectors of SK_MAX */
/* Query rows per register tile of NV key vectors: 6 with up to 4 (6 × 4 accumulators, 4 key vectors and a broadcast
 * of 32 registers), 3 with 5 to 7 (3 × 7 + 7 + 1); SK_ROWS the most. */
#define SK_ROWS VT_SK_ROWS
#define SK_ROWS_FOR(NV) ((NV) <= 4 ? SK_ROWS : 3)
static int sk_rows_of(int M) { return SK_ROWS_FOR((M + 15) / 16); }

/* Whether the small-key tiles serve M keys. */
static int sk_on(int M) { return M <= SK_MAX; }

/* vt_keys_t (sktile.h): blocks of 16 rows × 16 channels are transposed in
 * registers (masked loads past M and dh), and the next block's rows prefetched: the keys come from memory (a row per
 * token of a packed qkv). A copy one float at a time, even with the prefetches, took 40% as long as the tiles
 * themselves (perf, CSwin-T inference at batch 16). The op's seconds over 3 steps at batch 16, 3 alternated rounds
 * (AMD EPYC Zen 4, 2026-12-04): inference CSwin-T 0.28-0.36 → 0.21-0.26, Swin-T 0.18-0.25 → 0.17; training (2
 * steps) CSwin-T 0.51-0.52 → 0.45-0.48, Swin-T 0.40-0.47 → 0.32-0.36. */
void vt_keys_t(const float *K, int ldk, int M, int dh, float *Kt) {
    const int Mv = (M + 15) / 16 * 16;
    for (int j0 = 0; j0 < Mv; j0 += 16) {
        for (int r = 16; r < 32 && j0 + r < M; r++)
            for (int c = 0; c < dh; c += 16) __builtin_prefetch(K + (size_t)(j0 + r) * ldk + c, 0, 3);
        for (int c0 = 0; c0 < dh; c0 += 16) {
            const int nc = dh - c0 < 16 ? dh - c0 : 16;
            const __mmask16 cm = (__mmask16)((1u << nc) - 1u);
            __m512 a[16], b[16];
            for (int r = 0; r < 16; r++)
                a[r] = j0 + r < M ? _mm512_maskz_loadu_ps(cm, K + (size_t)(j0 + r) * ldk + c0) : _mm512_setzero_ps();
            for (int k = 0; k < 8; k++) { /* rows 2k, 2k+1 interleaved per 128-bit lane */
                b[2 * k] = _mm512_unpacklo_ps(a[2 * k], a[2 * k + 1]);
                b[2 * k + 1] = _mm512_unpackhi_ps(a[2 * k], a[2 * k + 1]);
            }
            for (int k = 0; k < 4; k++) { /* lane L of a[4k + m]: rows 4k..4k+3 of channel 4L + m */
                const __m512d x0 = _mm512_castps_pd(b[4 * k]), x1 = _mm512_castps_pd(b[4 * k + 1]);
                const __m512d x2 = _mm512_castps_pd(b[4 * k + 2]), x3 = _mm512_castps_pd(b[4 * k + 3]);
                a[4 * k] = _mm512_castpd_ps(_mm512_unpacklo_pd(x0, x2));
                a[4 * k + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(x0, x2));
                a[4 * k + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(x1, x3));
                a[4 * k + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(x1, x3));
            }
            for (int m = 0; m < 4; m++) { /* channel 4L + m: lane L of a[m], a[4 + m], a[8 + m], a[12 + m] */
                const __m512 e0 = _mm512_shuffle_f32x4(a[m], a[4 + m], 0x88);
                const __m512 e1 = _mm512_shuffle_f32x4(a[m], a[4 + m], 0xDD);
                const __m512 e2 = _mm512_shuffle_f32x4(a[8 + m], a[12 + m], 0x88);
                const __m512 e3 = _mm512_shuffle_f32x4(a[8 + m], a[12 + m], 0xDD);
                b[m] = _mm512_shuffle_f32x4(e0, e2, 0x88);
                b[8 + m] = _mm512_shuffle_f32x4(e0, e2, 0xDD);
                b[4 + m] = _mm512_shuffle_f32x4(e1, e3, 0x88);
                b[12 + m] = _mm512_shuffle_f32x4(e1, e3, 0xDD);
            }
            for (int c = 0; c < nc; c++) _mm512_storeu_ps(Kt + (size_t)(c0 + c) * Mv + j0, b[c]);
        }
    }
}

/* The rows < `rows` (<= R) of one tile, row stride M, with X = A·Ktᵀ (A's rows lda apart, dh deep, Kt's rows 16·NV
 * floats apart):
 *  mode 0 (probabilities): out = softmax(scale·X + kn + bias + mask) (kn, bias, mask NULL when absent);
 *  mode 1 (the logits' gradient from dP = X and the probabilities P): out = P ⊙ (X − Σⱼ X⊙P), db += out (db NULL:
 *  none).
 * Why not a library: a GEMM call per (window, head) of Swin's 49 × 49 × 32 ran at 80-90 GFLOP/s on one thread
 * (oneDNN and OpenBLAS: both pack the transposed operand per call), and the softmax rows after it, one row at a
 * time, waited on their reductions' latency (65 ns a row of 49). Here the tile's rows go through each step of the
 * softmax together. One pair's probabilities, 49 × 49 × 32 with a bias and a mask: 4.8-5.1 µs → 2.3 µs, 196 × 49 ×
 * 64 21-22 → 11 µs (AMD EPYC Zen 5, 1 thread, best of 5 × 20000, 2026-12-02). Since 2026-12-04 also 5 to 7 key
 * vectors in 3-row tiles, for CSwin's 98-key stripes (stage 3 of CSwin-T and FLatten-CSwin-T): the op's stage-3
 * seconds over 3 inference steps at batch 16, library product and softmax rows → tiles, 4 alternated rounds (AMD
 * EPYC Zen 4): CSwin-T 0.184-0.268 → 0.157-0.180, FLatten-CSwin-T 0.165-0.186 → 0.141-0.169; training 0.41-0.49 →
 * 0.35-0.38 (CSwin-T, 2 steps). NV (key vectors) and R (rows) are constants where inlined. */
static inline __attribute__((always_inline)) void sk_tile(const float *A, size_t lda, const float *Kt, int rows,
                                                           int M, int dh, float scale, int mode, const float *kn,
                                                           const float *bias, const float *mask, const float *P,
                                                           float *out, float *db, const int NV, const int R) {
    __m512 acc[SK_ROWS][SK_NV];
    const float *ar[SK_ROWS];
    const size_t ldt = 16 * (size_t)NV; /* Kt's row stride */
#pragma GCC unroll 6
    for (int r = 0; r < R; r++) {
        ar[r] = A + (size_t)(r < rows ? r : rows - 1) * lda; /* rows past `rows` repeat the last, never stored */
#pragma GCC unroll 7
        for (int v = 0; v < NV; v++) acc[r][v] = _mm512_setzero_ps();
    }
    for (int c = 0; c < dh; c++) {
        __m512 kv[SK_NV];
#pragma GCC unroll 7
        for (int v = 0; v < NV; v++) {
            kv[v] = _mm512_loadu_ps(Kt + (size_t)c * ldt + 16 * v);
            __asm__("" : "+v"(kv[v])); /* kept in a register: gcc folded the load into every multiply-add */
        }
#pragma GCC unroll 6
        for (int r = 0; r < R; r++) {
            const __m512 x = _mm512_set1_ps(ar[r][c]);
#pragma GCC unroll 7
            for (int v = 0; v < NV; v++) acc[r][v] = _mm512_fmadd_ps(x, kv[v], acc[r][v]);
        }
    }
    __mmask16 lm[SK_NV]; /* each vector's lanes below M */
#pragma GCC unroll 7
    for (int v = 0; v < NV; v++) lm[v] = M - 16 * v >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (M - 16 * v)) - 1u);
    __m512 red[SK_ROWS];
    float rs[SK_ROWS];
    if (mode == 0) {
        const __m512 vs = _mm512_set1_ps(scale), ninf = _mm512_set1_ps(-INFINITY);
#pragma GCC unroll 6
        for (int r = 0; r < R; r++) { /* logits and their row maxima */
            const size_t o = (size_t)(r < rows ? r : rows - 1) * M;
            red[r] = ninf;
#pragma GCC unroll 7
            for (int v = 0; v < NV; v++) {
                __m512 x = _mm512_mul_ps(acc[r][v], vs);
                if (kn) x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(lm[v], kn + 16 * v));
                if (bias) x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(lm[v], bias + o + 16 * v));
                if (mask) x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(lm[v], mask + o + 16 * v));
                acc[r][v] = _mm512_mask_mov_ps(ninf, lm[v], x);
                red[r] = _mm512_max_ps(red[r], acc[r][v]);
            }
        }
#pragma GCC unroll 6
        for (int r = 0; r < R; r++) rs[r] = _mm512_reduce_max_ps(red[r]);
        vt_sk_softmax_store(acc, rs, rows, lm, out, M, R, NV);
        return;
    }
#pragma GCC unroll 6
    for (int r = 0; r < R; r++) { /* Σⱼ dP⊙P per row (P read again below: it is in L1) */
        const size_t o = (size_t)(r < rows ? r : rows - 1) * M;
        red[r] = _mm512_setzero_ps();
#pragma GCC unroll 7
        for (int v = 0; v < NV; v++)
            red[r] = _mm512_fmadd_ps(_mm512_maskz_mov_ps(lm[v], acc[r][v]),
                                     _mm512_maskz_loadu_ps(lm[v], P + o + 16 * v), red[r]);
    }
#pragma GCC unroll 6
    for (int r = 0; r < R; r++) rs[r] = _mm512_reduce_add_ps(red[r]);
#pragma GCC unroll 6
    for (int r = 0; r < R; r++) {
        if (r >= rows) break;
        const __m512 dot = _mm512_set1_ps(rs[r]);
#pragma GCC unroll 7
        for (int v = 0; v < NV; v++) {
            const size_t o = (size_t)r * M + 16 * v;
            const __m512 g = _mm512_mul_ps(_mm512_maskz_loadu_ps(lm[v], P + o), _mm512_sub_ps(acc[r][v], dot));
            _mm512_mask_storeu_ps(out + o, lm[v], g);
            if (db) _mm512_mask_storeu_ps(db + o, lm[v], _mm512_add_ps(_mm512_maskz_loadu_ps(lm[v], db + o), g));
        }
    }
}

/* sk_tile over the tile of rows [i, i + R) of N (R = SK_ROWS_FOR(NV) for M's NV key vectors; the last tile fewer),
 * the per-row pointers (bias, mask, P, out, db; row stride M) moved to row i. */
static void sk_tile_at(const float *A, size_t lda, const float *Kt, int N, int M, int dh, float scale, int mode,
                       const float *kn, const float *bias, const float *mask, const float *P, float *out, float *db,
                       int i) {
    const int R = sk_rows_of(M), rows = N - i < R ? N - i : R;
    const size_t o = (size_t)i * M;
    A += (size_t)i * lda;
    /* the next tile's rows of A, which the tile reads one float at a time (Next-ViT's stage-3 attention, 16 × 12 pairs
     * of 196 × 49 × 32, forward + backward: without this the tiles were no faster than the GEMM calls, 0.44-0.54 s
     * per 100 before, 0.45-0.53 tiles; with it 0.40-0.44; Zen 5, 2026-12-02) */
    for (int r = R; r < 2 * R && i + r < N; r++)
        for (int c = 0; c < dh; c += 16) __builtin_prefetch(A + (size_t)r * lda + c, 0, 3);
    bias = bias ? bias + o : NULL;
    mask = mask ? mask + o : NULL;
    P = P ? P + o : NULL;
    db = db ? db + o : NULL;
    out += o;
    switch ((M + 15) / 16) {
    case 1: sk_tile(A, lda, Kt, rows, M, dh, scale, mode, kn, bias, mask, P, out, db, 1, SK_ROWS_FOR(1)); break;
    case 2: sk_tile(A, lda, Kt, rows, M, dh, scale, mode, kn, bias, mask, P, out, db, 2, SK_ROWS_FOR(2)); break;
    case 3: sk_tile(A, lda, Kt, rows, M, dh, scale, mode, kn, bias, mask, P, out, db, 3, SK_ROWS_FOR(3)); break;
    case 4: sk_tile(A, lda, Kt, rows, M, dh, scale, mode, kn, bias, mask, P, out, db, 4, SK_ROWS_FOR(4)); break;
    case 5: sk_tile(A, lda, Kt, rows, M, dh, scale, mode, kn, bias, mask, P, out, db, 5, SK_ROWS_FOR(5)); break;
    case 6: sk_tile(A, lda, Kt, rows, M, dh, scale, mode, kn, bias, mask, P, out, db, 6, SK_ROWS_FOR(6)); break;
    default: sk_tile(A, lda, Kt, rows, M, dh, scale, mode, kn, bias, mask, P, out, db, 7, SK_ROWS_FOR(7)); break;
    }
}

/* vt_sk_rows (sktile.h): the tiles on every thread when rows_par (a pair alone, outside parallel regions). */
void vt_sk_rows(const float *A, size_t lda, const float *Kt, int N, int M, int dh, float scale, int mode,
                const float *kn, const float *bias, const float *mask, const float *P, float *out, float *db,
                int rows_par) {
    const int R = sk_rows_of(M);
    if (rows_par) {
#pragma omp parallel for schedule(static)
        for (int i = 0; i < N; i += R) sk_tile_at(A, lda, Kt, N, M, dh, scale, mode, kn, bias, mask, P, out, db, i);
    } else {
        for (int i = 0; i < N; i += R) sk_tile_at(A, lda, Kt, N, M, dh, scale, mode, kn, bias, mask, P, out, db, i);
    }
}
#else
#define SK_MAX 0
static int sk_on(int M) { (void)M; return 0; }
#endif

/* One logits row: add the key-norm shift, bias and mask rows (each may be NULL), then softmax in place. */
static inline void logits_row(float *restrict r, const float *kn, const float *bias, const float *mask, int M) {
    if (kn)
#pragma omp simd
        for (int j = 0; j < M; j++) r[j] += kn[j];
    if (bias)
#pragma omp simd
        for (int j = 0; j < M; j++) r[j] += bias[j];
    if (mask)
#pragma omp simd
        for (int j = 0; j < M; j++) r[j] += mask[j];
    vt_softmax_row(r, r, M);
}

/* Floats of one thread's forward and backward scratch (the layouts at pair_fwd and pair_bwd). */
static size_t kt_floats(const attn_p *a) { return a->small ? (size_t)SK_MAX * (size_t)a->dh : 0; }
static size_t fwd_per(const attn_p *a) { return (size_t)a->N * a->M + (size_t)a->M + kt_floats(a); }
static size_t bwd_per(const attn_p *a) { return 2 * ((size_t)a->N * a->M + (size_t)a->M) + kt_floats(a); }

/* The probabilities of N query rows of one (batch, head) into s (N×M); kn is M floats of scratch, kt the small-key
 * tiles' key block (NULL without them). */
static void head_probs(const attn_p *a, const head_io *io, int N, float *s, float *kn, float *kt, int rows_par) {
    const int M = a->M, dh = a->dh;
    const float scale = a->scale;
    if (a->msf) /* −0.5·scale·‖k_j‖² */
        for (int j = 0; j < M; j++) {
            const float *kr = io->k + (size_t)j * a->ldkv;
            float acc = 0.0f;
            for (int c = 0; c < dh; c++) acc += kr[c] * kr[c];
            kn[j] = -0.5f * scale * acc;
        }
    const float *knp = a->msf ? kn : NULL;
#if defined(__AVX512F__)
    if (kt) {
        vt_keys_t(io->k, a->ldkv, M, dh, kt);
        vt_sk_rows(io->q, (size_t)a->ldq, kt, N, M, dh, scale, 0, knp, io->bias, io->mask, NULL, s, NULL, rows_par);
        return;
    }
#else
    (void)kt;
#endif
    vt_gemm(a->gemm, 0, 1, N, M, dh, scale, io->q, a->ldq, io->k, a->ldkv, 0.0f, s, M);
    const size_t ldm = (size_t)M;
    if (rows_par) {
#pragma omp parallel for schedule(static)
        for (int i = 0; i < N; i++)
            logits_row(s + i * ldm, knp, io->bias ? io->bias + i * ldm : NULL, io->mask ? io->mask + i * ldm : NULL,
                       M);
    } else {
        for (int i = 0; i < N; i++)
            logits_row(s + i * ldm, knp, io->bias ? io->bias + i * ldm : NULL, io->mask ? io->mask + i * ldm : NULL,
                       M);
    }
}

/* Forward of N query rows of one (batch, head): s (N×M) receives the probabilities; kn and kt as head_probs. */
static void head_fwd(const attn_p *a, const head_io *io, int N, float *s, float *kn, float *kt, const float *probe,
                     int rows_par) {
    const int M = a->M, dh = a->dh, C = a->H * dh;
    head_probs(a, io, N, s, kn, kt, rows_par);
    vt_gemm(a->gemm, 0, 0, N, dh, M, 1.0f, s, M, io->v, a->ldkv, 0.0f, io->o, C);
    if (probe)
        for (int i = 0; i < N; i++)
            for (int c = 0; c < dh; c++) io->o[(size_t)i * C + c] -= probe[(size_t)i * a->ldq + c];
}

/* Forward of chunk c (of nr) of pair bh = b·H + h's query rows with thread t's scratch; rows_par: the pairs run one
 * after another, each on all threads. */
static void pair_fwd(const vt_node *n, int bh, int c, int t, int rows_par) {
    const attn_p *a = VT_OP_P(n, attn_p);
    const int b = bh / a->H, h = bh % a->H, M = a->M;
    const int r0 = (int)((int64_t)a->N * c / a->nr), rows = (int)((int64_t)a->N * (c + 1) / a->nr) - r0;
    const size_t NM = (size_t)a->N * M, per = fwd_per(a); /* per thread: kn, a probability tile, the key block */
    const float *qd = n->in[0]->data, *kvd = a->kv_in >= 0 ? n->in[a->kv_in]->data : qd;
    const float *bias = a->bias_in >= 0 ? n->in[a->bias_in]->data : NULL;
    const float *mask = a->mask_in >= 0 ? n->in[a->mask_in]->data : NULL;
    float *probs = n->xout ? n->xout->data : a->keep_p ? n->save[0]->data : NULL;
    float *w = n->fws->data + (size_t)t * per;
    head_io io = head_ptrs(a, qd, kvd, bias, mask, n->out->data, b, h);
    io.q += (size_t)r0 * a->ldq, io.o += (size_t)r0 * a->H * a->dh; /* the chunk's rows */
    if (io.bias) io.bias += (size_t)r0 * M;
    if (io.mask) io.mask += (size_t)r0 * M;
    const float *probe = a->msf ? qd + ((size_t)b * a->N + r0) * a->ldq + a->p_off + (size_t)h * a->dh : NULL;
    head_fwd(a, &io, rows, probs ? probs + (size_t)bh * NM + (size_t)r0 * M : w + M, w, a->small ? w + NM + M : NULL,
             probe, rows_par);
}

/* Pairs in parallel when there are enough of them; otherwise in sequence outside any parallel region (the GEMMs and
 * row loops inside then use every thread: run inside an inactive `parallel if (0)` region, each of their parallel
 * regions made a nested team, and PVTv2-b1's one-head stage-1 attention at batch 1 took 9.4 ms instead of 0.9). */
static void attn_fwd(vt_node *n) {
    const attn_p *a = VT_OP_P(n, attn_p);
    const int BH = a->B * a->H, nr = a->nr;
    if (BH >= a->nt) {
#pragma omp parallel for schedule(static) num_threads(a->nt)
        for (int u = 0; u < BH * nr; u++) pair_fwd(n, u / nr, u % nr, omp_get_thread_num(), 0);
    } else {
        for (int bh = 0; bh < BH; bh++) pair_fwd(n, bh, 0, 0, 1);
    }
}

/* One row of the logits' gradient in place, r = p ⊙ (r − Σⱼ r⊙p), also added to the bias gradient row db if given. */
static inline void ds_row(float *restrict r, const float *restrict p, float *restrict db, int M) {
    vt_softmax_bwd_row(p, r, M);
    if (db)
#pragma omp simd
        for (int j = 0; j < M; j++) db[j] += r[j];
}

/* ds_row over N rows (row stride M), on every thread when rows_par. */
static void ds_rows(float *ds, const float *P, float *dbias, int N, int M, int rows_par) {
    if (rows_par) {
#pragma omp parallel for schedule(static)
        for (int i = 0; i < N; i++)
            ds_row(ds + (size_t)i * M, P + (size_t)i * M, dbias ? dbias + (size_t)i * M : NULL, M);
    } else {
        for (int i = 0; i < N; i++)
            ds_row(ds + (size_t)i * M, P + (size_t)i * M, dbias ? dbias + (size_t)i * M : NULL, M);
    }
}

/* Backward of one (batch, head). P: probabilities; dO: output gradient rows (stride H·dh); dq, dk, dv, dprobe,
 * dbias: gradient views (NULL where not wanted); ds: N×M scratch, csum: M floats, kt: the small-key tiles' value
 * block (NULL without them); bq, bkv: 1 to add to q's and kv's gradients, 0 to write them (vt_node.grad_fresh). */
static void head_bwd(const attn_p *a, const head_io *io, const float *P, const float *dO, float *dq, float *dk,
                     float *dv, float *dprobe, float *dbias, float *ds, float *csum, float *kt, int rows_par, float bq,
                     float bkv) {
    const int N = a->N, M = a->M, dh = a->dh, C = a->H * dh;
    const float scale = a->scale;
    if (dprobe) /* o = … − p */
        for (int i = 0; i < N; i++)
            for (int c = 0; c < dh; c++) {
                float *d = &dprobe[(size_t)i * a->ldq + c];
                *d = (bq != 0.0f ? *d : 0.0f) - dO[(size_t)i * C + c];
            }
    if (dv) vt_gemm(a->gemm, 1, 0, M, dh, N, 1.0f, P, M, dO, C, bkv, dv, a->ldkv);
    if (!dq && !dk && !dbias) return;
    /* dS = P ⊙ (dP − Σⱼ dP⊙P) with dP = dO·vᵀ, the gradient of the logits (and of the bias) */
#if defined(__AVX512F__)
    if (kt) {
        vt_keys_t(io->v, a->ldkv, M, dh, kt);
        vt_sk_rows(dO, (size_t)C, kt, N, M, dh, 1.0f, 1, NULL, NULL, NULL, P, ds, dbias, rows_par);
    } else
#else
    (void)kt;
#endif
    {
        vt_gemm(a->gemm, 0, 1, N, M, dh, 1.0f, dO, C, io->v, a->ldkv, 0.0f, ds, M);
        ds_rows(ds, P, dbias, N, M, rows_par);
    }
    if (dq) vt_gemm(a->gemm, 0, 0, N, dh, M, scale, ds, M, io->k, a->ldkv, bq, dq, a->ldq);
    if (!dk) return;
    vt_gemm(a->gemm, 1, 0, M, dh, N, scale, ds, M, io->q, a->ldq, bkv, dk, a->ldkv);
    if (a->msf) { /* the −0.5·scale·‖k_j‖² shift: dk_j −= scale·(Σᵢ dS_ij)·k_j */
        for (int j = 0; j < M; j++) csum[j] = 0.0f;
        for (int i = 0; i < N; i++) {
            const float *r = ds + (size_t)i * M;
#pragma omp simd
            for (int j = 0; j < M; j++) csum[j] += r[j];
        }
        for (int j = 0; j < M; j++) {
            const float *kr = io->k + (size_t)j * a->ldkv, f = scale * csum[j];
            float *dkr = dk + (size_t)j * a->ldkv;
            for (int c = 0; c < dh; c++) dkr[c] -= f * kr[c];
        }
    }
}

/* Backward of pair bh with thread t's scratch; db_base: where a shared bias's gradient goes (this thread's partial
 * sums, or the gradient itself when the pairs run in sequence). */
static void pair_bwd(const vt_node *n, int bh, int t, int rows_par, float *db_base) {
    const attn_p *a = VT_OP_P(n, attn_p);
    const int H = a->H, dh = a->dh, b = bh / H, h = bh % H;
    const size_t NM = (size_t)a->N * a->M, per = bwd_per(a);
    const float *qd = n->in[0]->data, *kvd = a->kv_in >= 0 ? n->in[a->kv_in]->data : qd;
    float *dqd = n->in[0]->grad, *dkvd = a->kv_in >= 0 ? n->in[a->kv_in]->grad : dqd;
    float *dbias = a->bias_in >= 0 && a->bias_grad ? n->in[a->bias_in]->grad : NULL;
    const float *bias = a->bias_in >= 0 ? n->in[a->bias_in]->data : NULL;
    const float *mask = a->mask_in >= 0 ? n->in[a->mask_in]->data : NULL, *dout = n->out->grad;
    const float bq = n->grad_fresh & 1u ? 0.0f : 1.0f;
    const float bkv = a->kv_in >= 0 ? (n->grad_fresh >> a->kv_in & 1u ? 0.0f : 1.0f) : bq;
    const head_io io = head_ptrs(a, qd, kvd, bias, mask, NULL, b, h);
    const size_t qrow = (size_t)b * a->N * a->ldq, kvrow = (size_t)b * a->M * a->ldkv, hc = (size_t)h * dh;
    float *dq = dqd ? dqd + qrow + a->q_off + hc : NULL;
    float *dprobe = dqd && a->msf ? dqd + qrow + a->p_off + hc : NULL;
    float *dk = dkvd ? dkvd + kvrow + a->k_off + hc : NULL, *dv = dkvd ? dkvd + kvrow + a->v_off + hc : NULL;
    float *db = NULL;
    if (dbias) /* per-batch bias: its own slice; shared: db_base's head slice */
        db = a->bias_batched ? dbias + (size_t)bh * NM : db_base + (size_t)h * NM;
    /* dS, column sums, then probabilities, norms, the key block */
    float *w = n->bws->data + (size_t)t * per, *P = w + NM + a->M, *kt = a->small ? P + NM + a->M : NULL;
    if (a->keep_p)
        P = n->save[0]->data + (size_t)bh * NM;
    else
        head_probs(a, &io, a->N, P, P + NM, kt, rows_par);
    head_bwd(a, &io, P, dout + (size_t)b * a->N * H * dh + hc, dq, dk, dv, dprobe, db, w, w + NM, kt, rows_par, bq,
             bkv);
}

static void attn_bwd(vt_node *n) {
    const attn_p *a = VT_OP_P(n, attn_p);
    if (!n->bws) return; /* eval graph: no backward scratch */
    const int BH = a->B * a->H, par = BH >= a->nt;
    const size_t NM = (size_t)a->N * a->M, HNM = (size_t)a->H * NM, per = bwd_per(a);
    float *dqd = n->in[0]->grad, *dkvd = a->kv_in >= 0 ? n->in[a->kv_in]->grad : dqd;
    float *dbias = a->bias_in >= 0 && a->bias_grad ? n->in[a->bias_in]->grad : NULL;
    if (!dqd && !dkvd && !dbias) return;
    float *part = n->bws->data + (size_t)a->nt * per; /* partial shared-bias gradients */
    const int partial = dbias && !a->bias_batched && par;
    if (partial) vt_zero(part, (int64_t)a->nt * (int64_t)HNM);
    if (par) { /* as in attn_fwd: no nested parallel regions in the sequential case */
#pragma omp parallel for schedule(static) num_threads(a->nt)
        for (int bh = 0; bh < BH; bh++) {
            const int t = omp_get_thread_num();
            pair_bwd(n, bh, t, 0, partial ? part + (size_t)t * HNM : dbias);
        }
    } else {
        for (int bh = 0; bh < BH; bh++) pair_bwd(n, bh, 0, 1, dbias);
    }
    if (partial) {
        const int nt = a->nt;
#pragma omp parallel for schedule(static)
        for (size_t e = 0; e < HNM; e++) {
            float s = 0.0f;
            for (int t = 0; t < nt; t++) s += part[(size_t)t * HNM + e];
            dbias[e] += s;
        }
    }
}

/* Backward reads every input: q, kv, bias and mask recompute the probabilities. */
#define ATTN_READS VT_READS(VT_READS_ALL_IN)
static const vt_opdef op_attention = {"attention", attn_fwd, attn_bwd, ATTN_READS, NULL, VT_OP_FUSED};
static const vt_opdef op_attention_msf = {"attention_msf", attn_fwd, attn_bwd, ATTN_READS, NULL, VT_OP_FUSED};

/* 1 when the n ranges [offs[i], offs[i] + len) cover [0, total) each channel once. */
static int tiles(const int *offs, int n, int len, int total) {
    if ((int64_t)n * len != total) return 0;
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++)
            if (offs[i] == offs[j]) return 0;
    return 1; /* n distinct offsets of ranges that lie inside [0, total), identical or disjoint (checked): a tiling */
}

/* 1 when channel ranges [a, a + len) and [b, b + len) are identical or disjoint (no race between heads). */
static int same_or_disjoint(int a, int b, int len) { return a == b || a + len <= b || b + len <= a; }

vt_tensor *vt_attention_ex(vt_graph *g, vt_tensor *q, vt_tensor *kv, const vt_attn_args *a) {
    if (vt_bad(g, 1, q)) return NULL;
    if (!a) return vt_fail(g, "attention", "no arguments given");
    const char *op = a->msf ? "attention_msf" : "attention";
    char sq[64], sk[64], sb[64];
    vt_shape_str(q, sq, 64);
    if (kv && vt_root(kv) == vt_root(q)) { /* the same memory: only q itself, or a view of the same elements */
        int same = kv->ndim == q->ndim && vt_root_offset(kv) == vt_root_offset(q);
        for (int d = 0; same && d < q->ndim; d++) same = kv->shape[d] == q->shape[d];
        if (!same)
            return vt_fail(g, op, "kv %s and q %s are different views of one tensor; pass kv = NULL for self-attention",
                           vt_shape_str(kv, sk, 64), sq);
        kv = NULL;
    }
    const int H = a->heads, dim = a->dim;
    if (q->ndim != 3 || H <= 0 || dim <= 0 || dim % H)
        return vt_fail(g, op, "q %s must be (B, N, Lq) and dim %d divisible by %d heads", sq, dim, H);
    const int B = q->shape[0], N = q->shape[1], Lq = q->shape[2];
    vt_tensor *kt = kv ? kv : q;
    vt_shape_str(kt, sk, 64);
    if (kv && (kv->ndim != 3 || kv->shape[0] != B))
        return vt_fail(g, op, "kv %s must be (B, M, Lkv) with the batch %d of q %s", sk, B, sq);
    const int M = kt->shape[1], Lkv = kt->shape[2];
    if (a->q_off < 0 || a->q_off > Lq - dim || (a->msf && (a->p_off < 0 || a->p_off > Lq - dim)))
        return vt_fail(g, op, "q %s: channels [%d, %d)%s must lie inside its %d channels", sq, a->q_off,
                       a->q_off + dim, a->msf ? " and the probe's" : "", Lq);
    if (a->k_off < 0 || a->k_off > Lkv - dim || a->v_off < 0 || a->v_off > Lkv - dim)
        return vt_fail(g, op, "%s %s: keys [%d, %d) and values [%d, %d) must lie inside its %d channels",
                       kv ? "kv" : "q", sk, a->k_off, a->k_off + dim, a->v_off, a->v_off + dim, Lkv);
    /* channel ranges in one tensor must be identical or disjoint (head h of one range never meets head h' ≠ h of
     * another, so the per-(batch, head) backward tasks never write the same gradient) */
    int offs[4], no = 0;
    offs[no++] = a->q_off;
    if (a->msf) offs[no++] = a->p_off;
    if (!kv) {
        offs[no++] = a->k_off;
        offs[no++] = a->v_off;
    }
    for (int i = 0; i < no; i++)
        for (int j = i + 1; j < no; j++)
            if (!same_or_disjoint(offs[i], offs[j], dim))
                return vt_fail(g, op, "q %s: channel ranges at offsets %d and %d (width %d) overlap partially", sq,
                               offs[i], offs[j], dim);
    if (kv && !same_or_disjoint(a->k_off, a->v_off, dim))
        return vt_fail(g, op, "kv %s: key and value channels at %d and %d (width %d) overlap partially", sk, a->k_off,
                       a->v_off, dim);
    int bias_batched = 0, nW = 1;
    if (a->bias) {
        const vt_tensor *bt = a->bias;
        const int nd = bt->ndim, lead = nd == 4 ? bt->shape[0] : 1;
        if (!((nd == 3 || nd == 4) && (lead == 1 || lead == B) && bt->shape[nd - 3] == H && bt->shape[nd - 2] == N &&
              bt->shape[nd - 1] == M))
            return vt_fail(g, op, "bias %s (%s) must be (%d, %d, %d) or (%d, %d, %d, %d) for q %s and %s %s",
                           vt_shape_str(bt, sb, 64), bt->name, H, N, M, B, H, N, M, sq, kv ? "kv" : "keys", sk);
        bias_batched = nd == 4 && lead == B && B > 1;
    }
    if (a->mask) {
        const vt_tensor *mt = a->mask;
        const int nd = mt->ndim;
        nW = nd == 3 ? mt->shape[0] : 1;
        if (!((nd == 2 || nd == 3) && mt->shape[nd - 2] == N && mt->shape[nd - 1] == M && B % nW == 0))
            return vt_fail(g, op, "mask %s (%s) must be (nW, %d, %d) with nW dividing the batch %d of q %s",
                           vt_shape_str(mt, sb, 64), mt->name, N, M, B, sq);
    }
    vt_tensor *in[4] = {q};
    int nin = 1, kv_in = -1, bias_in = -1, mask_in = -1;
    if (kv) in[kv_in = nin++] = kv;
    if (a->bias) in[bias_in = nin++] = a->bias;
    if (a->mask) in[mask_in = nin++] = a->mask;
    const int shape[3] = {B, N, dim};
    vt_node *n = vt_new_node(g, a->msf ? &op_attention_msf : &op_attention, in, nin, vt_new_act(g, 3, shape));
    if (!n) return NULL;
    const int nt = g->threads;
    const int bias_grad = a->bias && a->bias->requires_grad;
    /* small maps (M <= dh: the probabilities are at most a third of a packed qkv) are kept rather than recomputed */
    const int keep_p = g->training && M <= dim / H && !(a->probs && g->export_maps);
    *VT_OP_P(n, attn_p) = (attn_p){B, N, M, H, dim / H, nt, a->msf ? 1 : 0, Lq, Lkv, a->q_off, a->k_off, a->v_off,
                                   a->p_off, kv_in, bias_in, mask_in, bias_batched, bias_grad, nW, keep_p, 1,
                                   sk_on(M), a->scale, &g->gemm, 0, 0, 0};
    /* with fewer pairs than 8 per thread and not a multiple of the threads (DeiT-Ti's 3 heads at batch 1 on 2 threads
     * ran 2 pairs on one, 1 on the other), each pair's query rows in as many chunks as even them out: the op alone at
     * DeiT-Ti's batch-1 shapes 1.11-1.16x, eval graphs DeiT-Ti 1.022-1.034 at batch 1 (per-round medians, alternated
     * in one process, Intel Xeon Ice Lake, 2026-11-29); backward keeps whole pairs (their dK, dV sum over the rows) */
    attn_p *ap = VT_OP_P(n, attn_p);
    const int BH = B * H;
    if (BH >= nt)
        while (BH * ap->nr < 8 * nt && (BH * ap->nr) % nt && ap->nr < N) ap->nr++;
    if (keep_p && !vt_node_save(n, 0, (int64_t)B * H * N * M)) return NULL;
    n->macs = 2LL * B * N * M * dim;
    n->bwd_twice = 1;
    /* q's (and kv's) gradient can be written rather than added when its channel ranges tile it exactly */
    if (tiles(offs, no, dim, Lq)) n->grad_sets |= 1u;
    const int kvoffs[2] = {a->k_off, a->v_off};
    if (kv && tiles(kvoffs, 2, dim, Lkv)) n->grad_sets |= 1u << kv_in;
    if (a->probs) {
        const int ps[4] = {B, H, N, M};
        *a->probs = g->export_maps ? vt_node_extra_output(n, 4, ps) : NULL;
        if (g->export_maps && !*a->probs) return NULL;
    }
    const int64_t NM = (int64_t)N * M;
    if (!vt_node_work(n, 0, (int64_t)nt * (int64_t)fwd_per(ap))) return NULL;
    if (g->training &&
        !vt_node_work(n, 1, (int64_t)nt * (int64_t)bwd_per(ap) + (bias_grad && !bias_batched ? nt * H * NM : 0)))
        return NULL;
    return n->out;
}

/* ---- CSwin's cross-shaped windows (vt_stripe_attention) ----
 * A unit of work is hpu heads (a->hpu, w = hpu·dh channels) of one stripe: a vertical one (S rows × s columns) of an
 * image for the heads [0, H/2) and channels [0, C/2), or a horizontal one (s rows × S columns) for the heads [H/2, H)
 * and channels [C/2, C); N = S·s tokens in the stripe's row-major order. The tokens of a horizontal stripe are
 * consecutive rows of the packed qkv and of the output, read and written in place (as the chain's branch 1). A
 * vertical stripe's are not: its unit copies its channels of q, k and v into thread scratch (three runs of w floats
 * a token: what the chain's stripe partition wrote to memory, here kept in cache) and its output rows back into the
 * grid. Each unit adds the LePE of its v channels to its output. Backward copies dO in and the gradients out the
 * same way. Every (token, channel) of q, k, v and of the output belongs to one unit, so units run in parallel and
 * qkv's gradient is written where it is fresh (vt_node.grad_fresh), added to otherwise. The chain this replaces
 * (src/blocks/cswin.c) wrote the stripe partition of branch 0's q, k and v and read it back, wrote both branches'
 * outputs, read them again with the LePE convolution and once more to move them to the grid. */

/* Unit u (of 2·B·(S/s)·(H/2)/hpu): group (0 vertical, 1 horizontal stripes), image, stripe and first channel. */
typedef struct {
    int grp, b, idx, c0;
} stripe_unit;

static int stripe_units(const attn_p *a) { return 2 * a->B * (a->S / a->s) * (a->H / 2 / a->hpu); }

static stripe_unit stripe_of(const attn_p *a, int u) {
    const int ns = a->S / a->s, nh = a->H / 2 / a->hpu, w = a->hpu * a->dh;
    const int grp = u % 2, r = u / 2; /* the groups alternate: each thread's share of the units holds both */
    const stripe_unit p = {grp, r / nh / ns, r / nh % ns, grp * (a->H / 2) * a->dh + r % nh * w};
    return p;
}

/* The token (index in its image) of row r of unit p's stripe. */
static inline int stripe_token(const attn_p *a, const stripe_unit *p, int r) {
    const int S = a->S, s = a->s;
    return p->grp == 0 ? r / s * S + p->idx * s + r % s : p->idx * s * S + r;
}

/* Moves unit p's rows between x (ld floats a token, S·S tokens an image) and a tile (dld floats a row): `runs` runs
 * of w floats, x's at channels off + i·xs, the tile's at i·w. to_tile: the tile receives; else x does (acc: +=). */
static void stripe_move(const attn_p *a, const stripe_unit *p, float *x, size_t ld, int off, int xs, int runs, int w,
                        float *tile, size_t dld, int to_tile, int acc) {
    float *xb = x + (size_t)p->b * a->S * a->S * ld + off;
    for (int r = 0; r < a->N; r++) {
        float *xr = xb + (size_t)stripe_token(a, p, r) * ld, *tr = tile + (size_t)r * dld;
        for (int i = 0; i < runs; i++) {
            float *xp = xr + (size_t)i * xs, *tp = tr + (size_t)i * w;
            if (to_tile) {
#pragma omp simd
                for (int c = 0; c < w; c++) tp[c] = xp[c];
            } else if (acc) {
#pragma omp simd
                for (int c = 0; c < w; c++) xp[c] += tp[c];
            } else {
#pragma omp simd
                for (int c = 0; c < w; c++) xp[c] = tp[c];
            }
        }
    }
}

/* The stripe's grid: wh rows × ww columns. */
static void stripe_grid(const attn_p *a, const stripe_unit *p, int *wh, int *ww) {
    *wh = p->grp == 0 ? a->S : a->s;
    *ww = p->grp == 0 ? a->s : a->S;
}

/* o (rows ol floats apart) += LePE of v (rows vl apart) on the stripe's wh × ww grid, nc channels: bias[c] + Σ taps
 * wt[tap·C + c]·v at the tap's neighbour (zero outside the stripe); wt and bias at the unit's first channel, taps
 * (3·3, C). */
static void lepe_fwd(const float *v, size_t vl, int wh, int ww, int nc, const float *wt, size_t C, const float *bias,
                     float *o, size_t ol) {
    for (int y = 0; y < wh; y++)
        for (int x = 0; x < ww; x++) {
            float *op = o + ((size_t)y * ww + x) * ol;
            const float *tap[9], *vp[9];
            int nt = 0;
            for (int ky = 0; ky < 3; ky++) {
                const int yy = y + ky - 1;
                for (int kx = 0; kx < 3 && yy >= 0 && yy < wh; kx++) {
                    const int xx = x + kx - 1;
                    if (xx < 0 || xx >= ww) continue;
                    vp[nt] = v + ((size_t)yy * ww + xx) * vl;
                    tap[nt++] = wt + (size_t)(ky * 3 + kx) * C;
                }
            }
#if defined(__AVX512F__)
            /* 16 channels at a time, summed over the taps in a register: adding each tap into o itself waited on the
             * store of the tap before (CSwin-T inference at batch 1: half the op's own time outside the attention) */
            if (nc % 16 == 0) {
                for (int c0 = 0; c0 < nc; c0 += 16) {
                    __m512 acc = _mm512_add_ps(_mm512_loadu_ps(op + c0), _mm512_loadu_ps(bias + c0));
                    for (int k = 0; k < nt; k++)
                        acc = _mm512_fmadd_ps(_mm512_loadu_ps(tap[k] + c0), _mm512_loadu_ps(vp[k] + c0), acc);
                    _mm512_storeu_ps(op + c0, acc);
                }
                continue;
            }
#endif
#pragma omp simd
            for (int c = 0; c < nc; c++) op[c] += bias[c];
            for (int k = 0; k < nt; k++)
#pragma omp simd
                for (int c = 0; c < nc; c++) op[c] += tap[k][c] * vp[k][c];
        }
}

/* LePE's backward on a stripe (dO rows gl floats apart, v and dv rows vl apart): dv += the taps' transpose applied
 * to dO; dw (3·3, C) += Σ v at the tap's neighbour · dO, db += Σ dO (dw, db at the unit's first channel; each NULL
 * when not wanted). */
static void lepe_bwd(const float *v, const float *dO, size_t vl, size_t gl, int wh, int ww, int nc, const float *wt,
                     size_t C, float *dv, float *dw, float *db) {
    for (int y = 0; y < wh; y++)
        for (int x = 0; x < ww; x++) {
            const float *g = dO + ((size_t)y * ww + x) * gl;
            if (db)
#pragma omp simd
                for (int c = 0; c < nc; c++) db[c] += g[c];
            for (int ky = 0; ky < 3; ky++) {
                const int yy = y + ky - 1;
                if (yy < 0 || yy >= wh) continue;
                for (int kx = 0; kx < 3; kx++) {
                    const int xx = x + kx - 1;
                    if (xx < 0 || xx >= ww) continue;
                    const size_t nb = ((size_t)yy * ww + xx) * vl, k = (size_t)(ky * 3 + kx) * C;
                    if (dv) {
                        const float *w = wt + k;
                        float *d = dv + nb;
#pragma omp simd
                        for (int c = 0; c < nc; c++) d[c] += w[c] * g[c];
                    }
                    if (dw) {
                        const float *vp = v + nb;
                        float *d = dw + k;
#pragma omp simd
                        for (int c = 0; c < nc; c++) d[c] += vp[c] * g[c];
                    }
                }
            }
        }
}

/* LePE's taps (C, 1, 3, 3) -> (3·3, C). */
static void lepe_taps(const float *w, int C, float *wt) {
    for (int c = 0; c < C; c++)
        for (int k = 0; k < 9; k++) wt[(size_t)k * C + c] = w[(size_t)c * 9 + k];
}

/* The per-head code's view of a unit's rows: a vertical stripe's copied tile (q, k and v of its hpu heads side by
 * side in rows of 3·w floats, the output in rows of w), or a horizontal stripe's rows of the packed qkv and of the
 * output themselves. */
static attn_p unit_view(const attn_p *a, int grp) {
    attn_p v = *a;
    if (grp == 0) {
        v.H = a->hpu;
        v.ldq = v.ldkv = 3 * a->hpu * a->dh;
    }
    return v;
}

/* Thread scratch beyond the per-head code's, in floats: forward the q, k, v tile and the output's; backward those
 * (dO for the output's) and the q, k, v gradients'. */
static size_t stripe_fwd_per(const attn_p *a) { return fwd_per(a) + 4 * (size_t)a->N * a->hpu * a->dh; }
static size_t stripe_bwd_per(const attn_p *a) { return bwd_per(a) + 7 * (size_t)a->N * a->hpu * a->dh; }

/* Where unit p's q, k, v (w floats apart in a tile, C in qkv) and output rows are: the thread's tiles T and O
 * (vertical stripes, copied in by the caller) or the rows of qkv and out (horizontal ones; out may be NULL). */
typedef struct {
    float *q, *k, *v, *o;
    size_t ld, ol; /* floats between rows of q, k, v and of o */
} unit_rows;

static unit_rows unit_at(const attn_p *a, const stripe_unit *p, float *qkv, float *out, float *T, float *O) {
    const int C = a->H * a->dh, w = a->hpu * a->dh;
    if (p->grp == 0) return (unit_rows){T, T + w, T + 2 * w, O, 3 * (size_t)w, (size_t)w};
    const size_t row = (size_t)p->b * a->S * a->S + (size_t)p->idx * a->s * a->S;
    float *x = qkv + row * 3 * (size_t)C + p->c0;
    return (unit_rows){x, x + C, x + 2 * C, out ? out + row * (size_t)C + p->c0 : NULL, 3 * (size_t)C, (size_t)C};
}

static void stripe_fwd(vt_node *n) {
    const attn_p *a = VT_OP_P(n, attn_p);
    const int C = a->H * a->dh, w = a->hpu * a->dh, units = stripe_units(a);
    const size_t NM = (size_t)a->N * a->M, nw = (size_t)a->N * w;
    float *wt = n->fws->data, *scratch = wt + 9 * (size_t)C;
    lepe_taps(n->in[1]->data, C, wt);
    float *qkv = n->in[0]->data, *out = n->out->data;
    const float *lb = n->in[2]->data;
#pragma omp parallel for schedule(static) num_threads(a->nt)
    for (int u = 0; u < units; u++) {
        const stripe_unit p = stripe_of(a, u);
        float *sc = scratch + (size_t)omp_get_thread_num() * stripe_fwd_per(a);
        float *T = sc + fwd_per(a), *O = T + 3 * nw, *kt = a->small ? sc + NM + a->M : NULL;
        if (p.grp == 0) stripe_move(a, &p, qkv, 3 * (size_t)C, p.c0, C, 3, w, T, 3 * (size_t)w, 1, 0);
        const unit_rows r = unit_at(a, &p, qkv, out, T, O);
        const attn_p view = unit_view(a, p.grp);
        for (int j = 0; j < a->hpu; j++) {
            const int o = j * a->dh;
            const head_io io = {r.q + o, r.k + o, r.v + o, NULL, NULL, r.o + o};
            head_fwd(&view, &io, a->N, sc + a->M, sc, kt, NULL, 0);
        }
        int wh, ww;
        stripe_grid(a, &p, &wh, &ww);
        lepe_fwd(r.v, r.ld, wh, ww, w, wt + p.c0, (size_t)C, lb + p.c0, r.o, r.ol);
        if (p.grp == 0) stripe_move(a, &p, out, (size_t)C, p.c0, 0, 1, w, O, (size_t)w, 0, 0);
    }
}

static void stripe_bwd(vt_node *n) {
    const attn_p *a = VT_OP_P(n, attn_p);
    if (!n->bws) return; /* eval graph */
    float *dqkv = n->in[0]->grad, *dlw = n->in[1]->grad, *dlb = n->in[2]->grad;
    if (!dqkv && !dlw && !dlb) return;
    const int C = a->H * a->dh, w = a->hpu * a->dh, units = stripe_units(a), nt = a->nt;
    const size_t NM = (size_t)a->N * a->M, nw = (size_t)a->N * w, pw = 10 * (size_t)C;
    float *wt = n->bws->data, *part = wt + 9 * (size_t)C, *scratch = part + (size_t)nt * pw;
    lepe_taps(n->in[1]->data, C, wt);
    vt_zero(part, (int64_t)nt * (int64_t)pw);
    float *qkv = n->in[0]->data, *dout = n->out->grad;
    const int acc = !(n->grad_fresh & 1u);
#pragma omp parallel for schedule(static) num_threads(nt)
    for (int u = 0; u < units; u++) {
        const stripe_unit p = stripe_of(a, u);
        const int t = omp_get_thread_num(), tile = p.grp == 0;
        /* dS, column sums, probabilities, norms, the key block (as pair_bwd), then the tiles */
        float *sc = scratch + (size_t)t * stripe_bwd_per(a), *P = sc + NM + a->M;
        float *kt = a->small ? P + NM + a->M : NULL, *T = sc + bwd_per(a), *dOt = T + 3 * nw, *dT = dOt + nw;
        if (tile) {
            stripe_move(a, &p, qkv, 3 * (size_t)C, p.c0, C, 3, w, T, 3 * (size_t)w, 1, 0);
            stripe_move(a, &p, dout, (size_t)C, p.c0, 0, 1, w, dOt, (size_t)w, 1, 0);
        }
        /* the inputs' rows; the gradients' (o: dO's), in the tiles or in the tensors (dqkv NULL: dO's only) */
        const unit_rows r = unit_at(a, &p, qkv, NULL, T, NULL), d = unit_at(a, &p, dqkv ? dqkv : qkv, dout, dT, dOt);
        const float bg = tile || !acc ? 0.0f : 1.0f; /* tiles are written, then moved (added when acc) */
        const attn_p view = unit_view(a, p.grp);
        for (int j = 0; dqkv && j < a->hpu; j++) { /* without qkv's gradient only the LePE weights' below */
            const int o = j * a->dh;
            const head_io io = {r.q + o, r.k + o, r.v + o, NULL, NULL, NULL};
            head_probs(&view, &io, a->N, P, P + NM, kt, 0);
            head_bwd(&view, &io, P, d.o + o, d.q + o, d.k + o, d.v + o, NULL, NULL, sc, sc + NM, kt, 0, bg, bg);
        }
        int wh, ww;
        stripe_grid(a, &p, &wh, &ww);
        float *pt = part + (size_t)t * pw;
        lepe_bwd(r.v, d.o, r.ld, d.ol, wh, ww, w, wt + p.c0, (size_t)C, dqkv ? d.v : NULL, dlw ? pt + p.c0 : NULL,
                 dlb ? pt + 9 * (size_t)C + p.c0 : NULL);
        if (dqkv && tile) stripe_move(a, &p, dqkv, 3 * (size_t)C, p.c0, C, 3, w, dT, 3 * (size_t)w, 0, acc);
    }
    for (int c = 0; c < C; c++) /* the threads' partial sums, taps back to (C, 1, 3, 3) */
        for (int k = 0; k < 10; k++) {
            float sum = 0.0f;
            for (int t = 0; t < nt; t++) sum += part[(size_t)t * pw + (size_t)k * C + c];
            if (k < 9 && dlw) dlw[(size_t)c * 9 + k] += sum;
            if (k == 9 && dlb) dlb[c] += sum;
        }
}

static const vt_opdef op_stripe_attention = {"stripe_attention", stripe_fwd, stripe_bwd, ATTN_READS, NULL,
                                             VT_OP_FUSED};

vt_tensor *vt_stripe_attention(vt_graph *g, vt_tensor *qkv, int S, int s, int heads, float scale, vt_tensor *w,
                               vt_tensor *b) {
    if (vt_bad(g, 3, qkv, w, b)) return NULL;
    static const char *op = "stripe_attention";
    char sq[64], sw[64], sb[64];
    vt_shape_str(qkv, sq, 64);
    vt_shape_str(w, sw, 64);
    vt_shape_str(b, sb, 64);
    if (qkv->ndim != 3 || S < 1 || s < 1 || S % s || (int64_t)S * S != qkv->shape[1] || qkv->shape[2] % 3)
        return vt_fail(g, op, "qkv %s must be (B, S·S = %d·%d, 3C) with the stripe width %d dividing S = %d", sq, S, S,
                       s, S);
    const int B = qkv->shape[0], C = qkv->shape[2] / 3;
    if (heads < 2 || heads % 2 || C % heads)
        return vt_fail(g, op, "qkv %s: %d channels need an even number of heads dividing them (got %d)", sq, C, heads);
    if (!vt_has_shape(w, 4, C, 1, 3, 3) || !vt_has_shape(b, 1, C, 0, 0, 0))
        return vt_fail(g, op, "LePE weight %s (%s) and bias %s must be (%d, 1, 3, 3) and (%d) for qkv %s", sw, w->name,
                       sb, C, C, sq);
    vt_tensor *in[3] = {qkv, w, b};
    const int shape[3] = {B, S * S, C};
    vt_node *n = vt_new_node(g, &op_stripe_attention, in, 3, vt_new_act(g, 3, shape));
    if (!n) return NULL;
    const int N = S * s, dh = C / heads, nt = g->threads;
    attn_p *a = VT_OP_P(n, attn_p);
    *a = (attn_p){B, N, N, heads, dh, nt, 0, 3 * C, 3 * C, 0, C, 2 * C, 0, -1, -1, -1, 0, 0, 1, 0, 1, sk_on(N), scale,
                  &g->gemm, S, s, heads / 2};
    n->macs = 2LL * B * S * S * N * C + 9LL * B * S * S * C;
    n->bwd_twice = 1;
    /* units of fewer heads where whole stripes would leave threads idle (a stripe's H/2 heads at batch 1) */
    while (stripe_units(a) < 4 * nt && a->hpu % 2 == 0) a->hpu /= 2;
    n->grad_sets |= 1u; /* every element of qkv's gradient belongs to one unit */
    if (!vt_node_work(n, 0, 9LL * C + (int64_t)nt * (int64_t)stripe_fwd_per(a))) return NULL;
    if (g->training &&
        !vt_node_work(n, 1, 9LL * C + (int64_t)nt * (int64_t)(10 * (size_t)C + stripe_bwd_per(a))))
        return NULL;
    return n->out;
}
