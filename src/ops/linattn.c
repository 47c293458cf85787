/* Fused multi-head linear attention (FLatten's core, spec-flatten §1.2 steps 9-13), equal to the plain chain
 * split_heads → mean(k) → q·k̄ → +1e-6 → ^-1 → kᵀv/n → q·KV → ·z → merge_heads (checked in tests/test_ops_linattn.c)
 * without the head copies: every GEMM runs strided on the packed (B, tokens, channels) tensors.
 *
 * Per (batch b, head h), with Q (N×d), K (n×d), V (n×d) the head's channel slices:
 *   m = Kᵀ1/n (d),  KV = KᵀV/n (d×d),  den_i = Q_i·m + 1e-6,  z_i = 1/den_i,  o_i = z_i·(Q_i·KV) (+ add_i).
 * Backward, given dO (no need for o, the optional add, or a recomputed Q·KV):
 *   G = dO·KVᵀ (N×d).  The numerator num = Q·KV gets dnum = z∘dO, so dQ gets z_i·G_i from it.
 *   d den_i = −z_i²·Σ_c dO_ic·num_ic, and Σ_c dO_ic·num_ic = Σ_c dO_ic·Σ_e Q_ie·KV_ec = Q_i·G_i, hence
 *   dden_i = −z_i²·(Q_i·G_i) (= −z_i·Σ_c dO_ic·o_ic without the add).
 *   dQ_i = z_i·G_i + dden_i·m;   dKV = Qᵀ·dnum = Σ_i z_i·Q_iᵀdO_i;   dm = Qᵀ·dden = Σ_i dden_i·Q_i;
 *   dK = V·dKVᵀ/n + 1·dmᵀ/n;   dV = K·dKV/n;   d add = dO on its rows.
 * The backward reads q, k, v (inputs), the saved per-(b, h) KV and m, and the output gradient; not the output and
 * not the add input.
 * Focused mode (FLatten, vt_linear_attention_ex with a scale): Q and K are φ_p of the raw q and k + pe rows
 * (focus.c's row kernel, norms over all C channels), computed per block of rows into a per-thread buffer where the
 * passes need them and never stored: the vt_focus outputs this replaces were two (B, N, C) maps written, read
 * back and differentiated in passes of their own. Backward recomputes them the same way, writes dQ and dK of
 * each block into a buffer and chains the focus backward per row (dq, dk, dpe and the scale's gradient).
 * Threads: each pass is one parallel loop over (batch item, row chunk) tasks that cover every head (the focus
 * needs whole rows), chunked so that there are about 8 tasks per thread even at batch 1; the GEMMs inside run on
 * one thread each. KV and dKV over row chunks are per-chunk partial sums, reduced after the loop. With a positional
 * encoding, the backward's key pass gives each task a key chunk of every batch item (the chunk owns its pe rows). */
#include <omp.h>
#include <stdio.h>
#include <string.h>

#include "dwplane.h"
#include "focus.h"
#include "vitc/gemm.h"
#include "vitc/ops.h"

#define LA_EPS 1e-6f      /* the official denominator epsilon (q·k̄ + 1e-6) */
#define LA_RB 128         /* most rows per inner block: G, z·Q (and focused rows) stay in L1/L2 */
#define LA_BLOCK 16384    /* floats of one block of focused rows (rows·C), with at least LA_RBMIN rows */
#define LA_RBMIN 8
#define LA_TASKS 8        /* target tasks per thread per pass (load balance at small batch) */
#define LA_MINROWS 32     /* fewest rows in a chunk */
#define LA_PF 4           /* rows ahead whose q or k channels are prefetched before the focus reads them */

/* Inputs: in[0] q, in[1] k, in[2] v, then scale, pe, add where present (slots below). save[0]: per (b, h) KV (d×d)
 * then m (d) (train graphs). fws: KV and m (eval graphs), the KV/m partial sums over key chunks (when sk > 1), then
 * (focused) 1/softplus(scale) and per thread a block of focused rows. bws: dKV/dm partial sums over query chunks,
 * then per thread G and z·Q (LA_RB×d each) and (focused) focused rows, their gradient (rb×C each) and norms (rb×2),
 * then (focused) 1/softplus(scale), sigmoid(scale) and the scale gradient's per-thread sums (vt_focus_dsc_floats). */
typedef struct {
    int B, N, n, C, H, d;
    int ldq, q_off, ldk, k_off, ldv, v_off; /* row strides and first channels of q, k, v */
    int Na;                                  /* rows of the add input (the last Na output rows), 0 when none */
    int in_add, in_scale, in_pe;             /* input slots, -1 when absent (a scale turns the focus on) */
    float p;                                 /* focusing exponent */
    int nt;                                  /* threads */
    int sk, sq;                              /* chunks per batch item over the n key rows and the N query rows */
    int skb;                                 /* with pe: key chunks of the backward's key pass (all batch items) */
    int rb;                                  /* rows per inner block */
    const vt_gemm_plan *gemm;                /* the graph's GEMM dispatch */
    int in_dw, in_db, K, gh, gw;             /* the fused DWC (inference): weight and bias slots (-1: none), grid */
    int in_lw, in_lb;                        /* with it, a LePE's 3x3 weight and bias slots (-1: none) */
} la_p;

/* Chunks per batch item for `rows` rows: about LA_TASKS·nt tasks over `items` items, none under LA_MINROWS rows. */
static int chunks(int items, int rows, int nt) {
    const int want = (LA_TASKS * nt + items - 1) / items, most = (rows + LA_MINROWS - 1) / LA_MINROWS;
    const int s = want < most ? want : most;
    return s > 1 ? s : 1;
}

static inline int chunk_start(int s, int S, int rows) { return (int)((int64_t)s * rows / S); }

/* Start of query chunk s of sq; with the fused DWC on whole grid rows (the rows after the lead ones), so that its
 * blocks (a->rb rows, a multiple of the grid's width) cut no grid row: the DWC's strips run over whole rows. */
static inline int q_chunk(const la_p *a, int s, int lead) {
    if (a->in_dw < 0 || s == a->sq) return chunk_start(s, a->sq, a->N);
    return s ? lead + (int)((int64_t)s * a->gh / a->sq) * a->gw : 0;
}

static inline size_t per_bh(const la_p *a) { return (size_t)a->d * a->d + (size_t)a->d; }

/* Prefetches for writing the n floats at p (a gradient row the focus backward writes next). */
static inline void prefetch_row_w(float *p, int n) {
    for (int c = 0; c < n; c += 16) __builtin_prefetch(p + c, 1);
}

/* Rows [r0, r0 + rows) of batch item b of x (q or k: `total` rows per item, stride ld, channels from off): focused
 * into buf (stride C) when f is set (pe: the positional encoding, row r0 first, or NULL; st: NULL or 2 floats per
 * row for the norms), else x in place. *lds gets the stride of what is returned. */
static const float *rows_src(const la_p *a, const vt_focus_k *f, const float *x, int ld, int off, int total,
                             const float *pe, int b, int r0, int rows, float *buf, float *st, int *lds) {
    const float *xb = x + ((size_t)b * total + r0) * ld + off;
    *lds = f ? a->C : ld;
    if (!f) return xb;
    for (int r = 0; r < rows; r++) {
        if (r + LA_PF < rows) /* the row LA_PF ahead, whose channels are a strided slice the hardware misses */
            for (int c = 0; c < a->C; c += 16) __builtin_prefetch(xb + (size_t)(r + LA_PF) * ld + c);
        vt_focus_row_fwd(f, xb + (size_t)r * ld, pe ? pe + (size_t)(r0 + r) * a->C : NULL, buf + (size_t)r * a->C,
                         st ? st + 2 * r : NULL);
    }
    return buf;
}

/* Pass 1 task: the partial KV (d×d, scaled 1/n) and m (d) of every head over key rows [j0, j1) of batch item b, into
 * kv (head h's KV at h·(d² + d), its m after it); buf: a block of focused rows. */
static void kv_chunk(const la_p *a, const vt_focus_k *f, const float *k, const float *v, const float *pe, int b,
                     int j0, int j1, float *kv, float *buf) {
    const int d = a->d, H = a->H;
    const size_t L = per_bh(a);
    const float inv_n = 1.0f / (float)a->n;
    for (int h = 0; h < H; h++) memset(kv + h * L + (size_t)d * d, 0, sizeof(float) * d);
    for (int r0 = j0; r0 < j1; r0 += a->rb) {
        const int rows = j1 - r0 < a->rb ? j1 - r0 : a->rb;
        int lds;
        const float *src = rows_src(a, f, k, a->ldk, a->k_off, a->n, pe, b, r0, rows, buf, NULL, &lds);
        const float *vb = v + ((size_t)b * a->n + r0) * a->ldv + a->v_off;
        for (int h = 0; h < H; h++) {
            float *KV = kv + h * L, *m = KV + (size_t)d * d;
            vt_gemm(a->gemm, 1, 0, d, d, rows, inv_n, src + (size_t)h * d, lds, vb + (size_t)h * d, a->ldv,
                    r0 == j0 ? 0.0f : 1.0f, KV, d);
            for (int j = 0; j < rows; j++) {
                const float *kr = src + (size_t)j * lds + (size_t)h * d;
#pragma omp simd
                for (int c = 0; c < d; c++) m[c] += kr[c];
            }
        }
    }
    for (int h = 0; h < H; h++) {
        float *m = kv + h * L + (size_t)d * d;
        for (int c = 0; c < d; c++) m[c] *= inv_n;
    }
}

/* Sums S partial blocks of `len` floats (consecutive per item) into the first block of each of the `items`. */
static void reduce_partials(float *part, int items, int S, size_t len) {
    if (S <= 1) return;
#pragma omp parallel for schedule(static)
    for (int it = 0; it < items; it++) {
        float *dst = part + (size_t)it * S * len;
        for (int s = 1; s < S; s++) {
            const float *src = dst + (size_t)s * len;
#pragma omp simd
            for (size_t e = 0; e < len; e++) dst[e] += src[e];
        }
    }
}

static void la_fwd(vt_node *nd) {
    const la_p *a = VT_OP_P(nd, la_p);
    const int B = a->B, H = a->H, N = a->N, n = a->n, C = a->C, d = a->d, sk = a->sk, sq = a->sq;
    const size_t L = per_bh(a), HL = (size_t)H * L;
    const float *q = nd->in[0]->data, *k = nd->in[1]->data, *v = nd->in[2]->data;
    const float *add = a->in_add >= 0 ? nd->in[a->in_add]->data : NULL;
    const float *pe = a->in_pe >= 0 ? nd->in[a->in_pe]->data : NULL;
    float *o = nd->out->data, *w = nd->fws ? nd->fws->data : NULL;
    float *kvm = nd->save[0] ? nd->save[0]->data : w; /* per (b, h): KV then m */
    if (!nd->save[0]) w += (size_t)B * HL;
    float *part = w;
    if (sk > 1) w += (size_t)B * sk * HL;
    vt_focus_k fk = {C, a->p, NULL, NULL}, *f = NULL;
    if (a->in_scale >= 0) {
        vt_focus_consts(nd->in[a->in_scale]->data, C, w, NULL);
        fk.is = w;
        f = &fk;
        w += C;
    }
    const float *dwt = NULL, *dwb = NULL; /* the fused DWC's taps (K·K, C) and bias (C), the kernels tiled over heads */
    float *dwbuf = NULL;                  /* per thread rb·C of its outputs */
    if (a->in_dw >= 0) {
        const int KK = a->K * a->K;
        const float *wk = nd->in[a->in_dw]->data, *bk = nd->in[a->in_db]->data;
        for (int t = 0; t < KK; t++)
            for (int c = 0; c < C; c++) w[(size_t)t * C + c] = wk[(size_t)(c % d) * KK + t];
        for (int c = 0; c < C; c++) w[(size_t)KK * C + c] = bk[c % d];
        if (a->in_lw >= 0) { /* the LePE's 3x3 taps onto the centre of the K x K ones, its bias onto theirs */
            const float *lw = nd->in[a->in_lw]->data, *lb = nd->in[a->in_lb]->data;
            const int o = a->K / 2 - 1;
            for (int t = 0; t < 9; t++) {
                float *wt = w + ((size_t)(o + t / 3) * a->K + o + t % 3) * C;
                for (int c = 0; c < C; c++) wt[c] += lw[(size_t)c * 9 + t];
            }
            for (int c = 0; c < C; c++) w[(size_t)KK * C + c] += lb[c];
        }
        dwt = w;
        dwb = w + (size_t)KK * C;
        w += (size_t)(KK + 1) * C;
        dwbuf = w;
        w += (size_t)a->nt * a->rb * C;
    }
    const size_t tb = (size_t)a->rb * C; /* per-thread focused rows */
    /* pass 1: KV and m of every head per batch item, over key chunks (partials when sk > 1) */
#pragma omp parallel for schedule(static) num_threads(a->nt)
    for (int t = 0; t < B * sk; t++) {
        const int b = t / sk, s = t % sk;
        float *dst = sk > 1 ? part + (size_t)t * HL : kvm + (size_t)b * HL;
        kv_chunk(a, f, k, v, pe, b, chunk_start(s, sk, n), chunk_start(s + 1, sk, n), dst,
                 w + (size_t)omp_get_thread_num() * tb);
    }
    if (sk > 1) {
        reduce_partials(part, B, sk, HL);
        for (int b = 0; b < B; b++) memcpy(kvm + (size_t)b * HL, part + (size_t)b * sk * HL, sizeof(float) * HL);
    }
    /* pass 2: o = (Q·KV)·z (+ add), over query chunks, written into the merged output */
    const int lead = N - a->Na;
#pragma omp parallel for schedule(static) num_threads(a->nt)
    for (int t = 0; t < B * sq; t++) {
        const int b = t / sq, s = t % sq, i1 = q_chunk(a, s + 1, lead);
        float *buf = w + (size_t)omp_get_thread_num() * tb;
        float *dwo = dwbuf ? dwbuf + (size_t)omp_get_thread_num() * tb : NULL;
        for (int i0 = q_chunk(a, s, lead), rows; i0 < i1; i0 += rows) {
            rows = i1 - i0 < a->rb ? i1 - i0 : a->rb;
            if (dwo && i0 < lead && rows > lead - i0) rows = lead - i0; /* lead rows alone: grid rows align */
            const int g0 = i0 > lead ? i0 : lead; /* first grid row */
            int lds;
            const float *src = rows_src(a, f, q, a->ldq, a->q_off, N, NULL, b, i0, rows, buf, NULL, &lds);
            if (dwo && g0 < i0 + rows) /* the DWC of the block's grid rows, the add term read below */
                vt_dw_nhwc_pixels(v + ((size_t)b * n + lead) * a->ldv + a->v_off, a->ldv, a->gh, a->gw, C, dwt, a->K,
                                  dwb, dwo, C, g0 - lead, i0 + rows - lead);
            for (int h = 0; h < H; h++) {
                const float *KV = kvm + (size_t)b * HL + h * L, *m = KV + (size_t)d * d, *qb = src + (size_t)h * d;
                float *ob = o + ((size_t)b * N + i0) * C + (size_t)h * d;
                vt_gemm(a->gemm, 0, 0, rows, d, d, 1.0f, qb, lds, KV, d, 0.0f, ob, C);
                for (int r = 0; r < rows; r++) {
                    const float *qr = qb + (size_t)r * lds;
                    float *orow = ob + (size_t)r * C, den = 0.0f;
#pragma omp simd reduction(+ : den)
                    for (int c = 0; c < d; c++) den += qr[c] * m[c];
                    const float z = 1.0f / (den + LA_EPS);
                    const int i = i0 + r;
                    if ((add || dwo) && i >= lead) {
                        const float *ar = dwo ? dwo + (size_t)(i - g0) * C + (size_t)h * d
                                              : add + ((size_t)b * a->Na + (i - lead)) * C + (size_t)h * d;
#pragma omp simd
                        for (int c = 0; c < d; c++) orow[c] = orow[c] * z + ar[c];
                    } else {
#pragma omp simd
                        for (int c = 0; c < d; c++) orow[c] *= z;
                    }
                }
            }
        }
    }
}

/* Backward's pass A task: query rows [i0, i0 + rows) of batch item b, every head: dQ (or, focused, the focused
 * rows' gradient chained through the focus into dq and the scale), d add, and the partial dKV, dm into dKVb. */
static void bwd_query_block(const la_p *a, const vt_focus_k *f, const float *q, const float *dO, const float *kvb,
                            float *dq, float *dadd, float *dsc, int b, int i0, int rows, int need_k, float *dKVb,
                            float *tmp) {
    const int C = a->C, d = a->d, N = a->N, lead = N - a->Na;
    const size_t L = per_bh(a), dd = (size_t)d * d;
    float *G = tmp, *Qz = G + (size_t)LA_RB * d, *buf = Qz + (size_t)LA_RB * d, *dbuf = buf + (size_t)a->rb * C;
    float *st = dbuf + (size_t)a->rb * C;
    int lds;
    const float *src = rows_src(a, f, q, a->ldq, a->q_off, N, NULL, b, i0, rows, buf, st, &lds);
    const int want_dsrc = dq || (f && dsc);
    float *dqb = dq ? dq + ((size_t)b * N + i0) * a->ldq + a->q_off : NULL;
    for (int h = 0; h < a->H; h++) {
        const float *KV = kvb + h * L, *m = KV + dd, *qb = src + (size_t)h * d;
        const float *gb = dO + ((size_t)b * N + i0) * C + (size_t)h * d;
        float *dKV = dKVb + h * L, *dm = dKV + dd;
        vt_gemm(a->gemm, 0, 1, rows, d, d, 1.0f, gb, C, KV, d, 0.0f, G, d); /* G = dO·KVᵀ */
        for (int r = 0; r < rows; r++) {
            const float *qr = qb + (size_t)r * lds, *Gr = G + (size_t)r * d;
            float den = 0.0f, qg = 0.0f;
#pragma omp simd reduction(+ : den, qg)
            for (int c = 0; c < d; c++) {
                den += qr[c] * m[c];
                qg += qr[c] * Gr[c];
            }
            const float z = 1.0f / (den + LA_EPS), dden = -z * z * qg;
            float *qz = Qz + (size_t)r * d;
#pragma omp simd
            for (int c = 0; c < d; c++) {
                qz[c] = z * qr[c];
                dm[c] += dden * qr[c];
            }
            if (want_dsrc && f) { /* the focused row's gradient, chained below */
                float *dr = dbuf + (size_t)r * C + (size_t)h * d;
#pragma omp simd
                for (int c = 0; c < d; c++) dr[c] = z * Gr[c] + dden * m[c];
            } else if (dqb) {
                float *dqr = dqb + (size_t)r * a->ldq + (size_t)h * d;
#pragma omp simd
                for (int c = 0; c < d; c++) dqr[c] += z * Gr[c] + dden * m[c];
            }
            const int i = i0 + r;
            if (dadd && i >= lead) {
                float *dar = dadd + ((size_t)b * a->Na + (i - lead)) * C + (size_t)h * d;
                const float *gr = gb + (size_t)r * C;
#pragma omp simd
                for (int c = 0; c < d; c++) dar[c] += gr[c];
            }
        }
        if (need_k) /* dKV += (z∘Q)ᵀ·dO */
            vt_gemm(a->gemm, 1, 0, d, d, rows, 1.0f, Qz, d, gb, C, 1.0f, dKV, d);
    }
    if (want_dsrc && f) {
        const float *qb = q + ((size_t)b * N + i0) * a->ldq + a->q_off;
        for (int r = 0; r < rows; r++) {
            if (dqb && r + LA_PF < rows) prefetch_row_w(dqb + (size_t)(r + LA_PF) * a->ldq, C);
            vt_focus_row_bwd(f, qb + (size_t)r * a->ldq, NULL, buf + (size_t)r * C, st + 2 * r, dbuf + (size_t)r * C,
                             dqb ? dqb + (size_t)r * a->ldq : NULL, NULL, dsc);
        }
    }
}

/* Backward's pass B on key rows [j0, j0 + rows) of batch item b, every head: dK = V·dKVᵀ/n + dm/n (or, focused,
 * the focused rows' gradient chained through the focus into dk, dpe and the scale), dV = K·dKV/n. */
static void bwd_key_block(const la_p *a, const vt_focus_k *f, const float *k, const float *v, const float *pe,
                          const float *dKVb, float *dk, float *dv, float *dpe, float *dsc, int b, int j0, int rows,
                          float *tmp) {
    const int C = a->C, d = a->d, n = a->n;
    const size_t L = per_bh(a), dd = (size_t)d * d;
    const float inv_n = 1.0f / (float)n;
    float *buf = tmp + (size_t)2 * LA_RB * d, *dbuf = buf + (size_t)a->rb * C, *st = dbuf + (size_t)a->rb * C;
    int lds;
    const float *src = rows_src(a, f, k, a->ldk, a->k_off, n, pe, b, j0, rows, buf, st, &lds);
    const int want_dsrc = dk || (f && (dsc || dpe));
    float *dkb = dk ? dk + ((size_t)b * n + j0) * a->ldk + a->k_off : NULL;
    float *dst = f ? dbuf : dkb; /* focused: the rows' gradient first, chained below */
    const int ldd = f ? C : a->ldk;
    const float *vb = v + ((size_t)b * n + j0) * a->ldv + a->v_off;
    float *dvb = dv ? dv + ((size_t)b * n + j0) * a->ldv + a->v_off : NULL;
    for (int h = 0; h < a->H; h++) {
        const float *dKV = dKVb + h * L, *dm = dKV + dd;
        if (want_dsrc) {
            float *dh = dst + (size_t)h * d;
            vt_gemm(a->gemm, 0, 1, rows, d, d, inv_n, vb + (size_t)h * d, a->ldv, dKV, d, f ? 0.0f : 1.0f, dh, ldd);
            for (int j = 0; j < rows; j++) {
                float *dr = dh + (size_t)j * ldd;
#pragma omp simd
                for (int c = 0; c < d; c++) dr[c] += dm[c] * inv_n;
            }
        }
        if (dvb)
            vt_gemm(a->gemm, 0, 0, rows, d, d, inv_n, src + (size_t)h * d, lds, dKV, d, 1.0f, dvb + (size_t)h * d,
                    a->ldv);
    }
    if (want_dsrc && f) {
        const float *kb = k + ((size_t)b * n + j0) * a->ldk + a->k_off;
        for (int r = 0; r < rows; r++) {
            if (dkb && r + LA_PF < rows) prefetch_row_w(dkb + (size_t)(r + LA_PF) * a->ldk, C);
            vt_focus_row_bwd(f, kb + (size_t)r * a->ldk, pe ? pe + (size_t)(j0 + r) * C : NULL, buf + (size_t)r * C,
                             st + 2 * r, dbuf + (size_t)r * C, dkb ? dkb + (size_t)r * a->ldk : NULL,
                             dpe ? dpe + (size_t)(j0 + r) * C : NULL, dsc);
        }
    }
}

static void la_bwd(vt_node *nd) {
    const la_p *a = VT_OP_P(nd, la_p);
    if (!nd->save[0] || !nd->bws) return; /* eval graph: nothing saved */
    const int B = a->B, H = a->H, N = a->N, n = a->n, C = a->C, d = a->d, sk = a->sk, sq = a->sq, nt = a->nt;
    const size_t L = per_bh(a), HL = (size_t)H * L;
    const float *q = nd->in[0]->data, *k = nd->in[1]->data, *v = nd->in[2]->data, *dO = nd->out->grad;
    float *dq = nd->in[0]->grad, *dk = nd->in[1]->grad, *dv = nd->in[2]->grad;
    float *dadd = a->in_add >= 0 ? nd->in[a->in_add]->grad : NULL;
    vt_tensor *sct = a->in_scale >= 0 ? nd->in[a->in_scale] : NULL, *pet = a->in_pe >= 0 ? nd->in[a->in_pe] : NULL;
    float *dsc = sct ? sct->grad : NULL, *dpe = pet ? pet->grad : NULL;
    const float *pe = pet ? pet->data : NULL;
    if (!dO || (!dq && !dk && !dv && !dadd && !dsc && !dpe)) return;
    const float *kvm = nd->save[0]->data;
    const size_t tb = (size_t)2 * LA_RB * d + (sct ? (size_t)2 * a->rb * (C + 1) : 0); /* per-thread temporaries */
    float *part = nd->bws->data, *tmp = part + (size_t)B * sq * HL; /* dKV/dm partials, then per-thread temps */
    vt_focus_k fk = {C, a->p, NULL, NULL}, *f = NULL;
    float *scp = NULL; /* per-thread float blocks of the scale gradient, flushed into sums after each row block */
    double *sums = NULL;
    if (sct) {
        float *w = tmp + (size_t)nt * tb;
        vt_focus_consts(sct->data, C, w, w + C);
        fk.is = w;
        fk.sig = w + C;
        f = &fk;
        if (dsc) {
            scp = w + 2 * C;
            sums = vt_focus_dsc_sums(scp, nt, C);
        }
    }
    const int need_k = dk || dv || dpe || dsc;
    /* pass A (query chunks): dQ, d add, and the partial dKV, dm of each chunk */
#pragma omp parallel for schedule(static) num_threads(nt)
    for (int t = 0; t < B * sq; t++) {
        const int b = t / sq, s = t % sq, i1 = chunk_start(s + 1, sq, N), th = omp_get_thread_num();
        float *dKVb = part + (size_t)t * HL;
        memset(dKVb, 0, sizeof(float) * HL);
        for (int i0 = chunk_start(s, sq, N); i0 < i1; i0 += a->rb) {
            bwd_query_block(a, f, q, dO, kvm + (size_t)b * HL, dq, dadd, scp ? scp + (size_t)th * C : NULL, b, i0,
                            i1 - i0 < a->rb ? i1 - i0 : a->rb, need_k, dKVb, tmp + (size_t)th * tb);
            if (scp) vt_focus_dsc_flush(scp + (size_t)th * C, sums + (size_t)th * C, C);
        }
    }
    if (need_k) {
        reduce_partials(part, B, sq, HL);
        /* pass B (key chunks; with pe, each task owns its chunk's rows in every batch item) */
        const int per_b = pe ? 0 : 1, tasks = pe ? a->skb : B * sk, S = pe ? a->skb : sk;
#pragma omp parallel for schedule(static) num_threads(nt)
        for (int t = 0; t < tasks; t++) {
            const int s = t % S, b0 = per_b ? t / S : 0, b1 = per_b ? b0 + 1 : B, th = omp_get_thread_num();
            const int j1 = chunk_start(s + 1, S, n);
            for (int b = b0; b < b1; b++)
                for (int j0 = chunk_start(s, S, n); j0 < j1; j0 += a->rb) {
                    bwd_key_block(a, f, k, v, pe, part + (size_t)b * sq * HL, dk, dv, dpe,
                                  scp ? scp + (size_t)th * C : NULL, b, j0, j1 - j0 < a->rb ? j1 - j0 : a->rb,
                                  tmp + (size_t)th * tb);
                    if (scp) vt_focus_dsc_flush(scp + (size_t)th * C, sums + (size_t)th * C, C);
                }
        }
    }
    if (dsc) vt_focus_dsc_add(sums, nt, C, dsc);
}

/* Inputs q, k, v, then add (plain) or scale, pe, add (focused; without a pe, add moves up and counts as read). */
static const vt_opdef op_linattn = {"linear_attention", la_fwd, la_bwd,
                                    VT_READS(VT_READS_IN(0) | VT_READS_IN(1) | VT_READS_IN(2)), NULL, VT_OP_FUSED};
static const vt_opdef op_linattn_focus = {"linear_attention", la_fwd, la_bwd,
                                          VT_READS(VT_READS_IN(0) | VT_READS_IN(1) | VT_READS_IN(2) | VT_READS_IN(3) |
                                                   VT_READS_IN(4)), NULL, VT_OP_FUSED};

/* A tensor whose gradient the backward writes on another schedule than x's: it may share x's memory only as the
 * same tensor with a disjoint channel range. */
static int overlaps(vt_tensor *x, int xo, vt_tensor *y, int yo, int C) {
    if (vt_root(x) != vt_root(y)) return 0;
    return x != y || !(xo + C <= yo || yo + C <= xo);
}

vt_tensor *vt_linear_attention_ex(vt_graph *g, vt_tensor *q, vt_tensor *k, vt_tensor *v, const vt_linattn_args *la) {
    if (!la) return vt_fail(g, "linear_attention", "no arguments given");
    vt_tensor *add = la->add, *scale = la->scale, *pe = la->pe;
    if (vt_bad(g, 3, q, k, v) || (add && vt_bad(g, 1, add)) || (scale && vt_bad(g, 1, scale)) ||
        (pe && vt_bad(g, 1, pe)))
        return NULL;
    char sq[64], sk[64], sv[64], sa[64] = "none", ss[64] = "none", sp[64] = "none";
    vt_shape_str(q, sq, 64);
    vt_shape_str(k, sk, 64);
    vt_shape_str(v, sv, 64);
    if (add) vt_shape_str(add, sa, 64);
    if (scale) vt_shape_str(scale, ss, 64);
    if (pe) vt_shape_str(pe, sp, 64);
    const int heads = la->heads;
    if (q->ndim != 3 || k->ndim != 3 || v->ndim != 3 || heads <= 0)
        return vt_fail(g, "linear_attention", "q %s, k %s, v %s must be (B, N, Lq), (B, n, Lk), (B, n, Lv); %d heads",
                       sq, sk, sv, heads);
    const int B = q->shape[0], N = q->shape[1], n = k->shape[1], C = la->C > 0 ? la->C : q->shape[2];
    const int qo = la->q_off, ko = la->k_off, vo = la->v_off;
    if (C % heads || k->shape[0] != B || v->shape[0] != B || v->shape[1] != n || qo < 0 || qo > q->shape[2] - C ||
        ko < 0 || ko > k->shape[2] - C || vo < 0 || vo > v->shape[2] - C)
        return vt_fail(g, "linear_attention", "q %s, k %s, v %s must be (B, N, Lq), (B, n, Lk), (B, n, Lv) with C = %d "
                       "divisible by %d heads and the channels [%d, %d + C) of q, [%d, %d + C) of k and [%d, %d + C) "
                       "inside v", sq, sk, sv, C, heads, qo, qo, ko, ko, vo, vo);
    if (add && (add->ndim != 3 || add->shape[0] != B || add->shape[1] > N || add->shape[2] != C))
        return vt_fail(g, "linear_attention", "add %s must be (B, Na, C) with Na <= N for q %s", sa, sq);
    if ((pe && !scale) || (scale && (scale->numel != C || !(la->p > 0.0f))) || (pe && pe->numel != (int64_t)n * C))
        return vt_fail(g, "linear_attention", "focus: scale %s must hold C = %d values (required with a positional "
                       "encoding), positional encoding %s n·C = %d·%d values, exponent %g > 0", ss, C, sp, n, C,
                       (double)la->p);
    /* the backward tasks write q's, k's, v's and add's gradients on different schedules: v and add may not share
     * memory with the others (q and k may: their gradients are written in different passes) */
    vt_tensor *ra = add ? vt_root(add) : NULL;
    if (overlaps(v, vo, q, qo, C) || overlaps(v, vo, k, ko, C) ||
        (ra && (ra == vt_root(q) || ra == vt_root(k) || ra == vt_root(v))))
        return vt_fail(g, "linear_attention", "v %s%s%s shares memory with q %s or k %s", sv, add ? " or add " : "",
                       add ? sa : "", sq, sk);
    vt_tensor *dw = la->dwc_w, *db = la->dwc_b;
    const int gh = la->grid_h, gw = la->grid_w, K = dw && dw->ndim == 4 ? dw->shape[2] : 0;
    if (dw || db) {
        char s1[64] = "none", s2[64] = "none";
        if (dw) vt_shape_str(dw, s1, 64);
        if (db) vt_shape_str(db, s2, 64);
        const int d = C / heads;
        if (g->training || add || !dw || !db || vt_bad(g, 2, dw, db) || dw->ndim != 4 || dw->shape[0] != d ||
            dw->shape[1] != 1 || dw->shape[3] != K || K % 2 == 0 || db->numel != d || gh <= 0 || gw <= 0 ||
            (int64_t)gh * gw > n || n != N)
            return vt_fail(g, "linear_attention", "fused DWC: weight %s must be (d, 1, K, K) with K odd and bias %s "
                           "(d), d = %d, over a %dx%d grid of the last of n = N = %d / %d rows, in inference graphs "
                           "and without an add term", s1, s2, d, gh, gw, N, n);
    }
    vt_tensor *lw = la->lepe_w, *lb = la->lepe_b;
    if ((lw || lb) && (!dw || K < 3 || vt_bad(g, 2, lw, lb) || !vt_has_shape(lw, 4, C, 1, 3, 3) ||
                       !vt_has_shape(lb, 1, C, 0, 0, 0))) {
        char s1[64] = "none", s2[64] = "none";
        if (lw) vt_shape_str(lw, s1, 64);
        if (lb) vt_shape_str(lb, s2, 64);
        return vt_fail(g, "linear_attention", "LePE: weight %s and bias %s must be (%d, 1, 3, 3) and (%d), with the "
                       "fused DWC of a kernel of at least 3", s1, s2, C, C);
    }
    vt_tensor *in[10] = {q, k, v};
    int nin = 3, in_add = -1, in_scale = -1, in_pe = -1, in_dw = -1, in_db = -1, in_lw = -1, in_lb = -1;
    if (scale) in[in_scale = nin++] = scale;
    if (pe) in[in_pe = nin++] = pe;
    if (add) in[in_add = nin++] = add;
    if (dw) {
        in[in_dw = nin++] = dw;
        in[in_db = nin++] = db;
    }
    if (lw) {
        in[in_lw = nin++] = lw;
        in[in_lb = nin++] = lb;
    }
    const int shape[3] = {B, N, C};
    vt_node *nd = vt_new_node(g, scale ? &op_linattn_focus : &op_linattn, in, nin, vt_new_act(g, 3, shape));
    if (!nd) return NULL;
    const int nt = g->threads, d = C / heads, focus = scale != NULL;
    int rb = LA_BLOCK / C;
    rb = !focus || rb > LA_RB ? LA_RB : rb < LA_RBMIN ? LA_RBMIN : rb;
    int nq = chunks(B, N, nt);
    if (dw) { /* query chunks and blocks of whole grid rows (q_chunk) */
        rb = rb / gw > 1 ? rb / gw * gw : gw;
        nq = nq < gh ? nq : gh;
    }
    la_p p = {B, N, n, C, heads, d, q->shape[2], qo, k->shape[2], ko, v->shape[2], vo,
              add ? add->shape[1] : dw ? gh * gw : 0, in_add, in_scale, in_pe, la->p, nt, chunks(B, n, nt),
              nq, chunks(1, n, nt), rb, &g->gemm, in_dw, in_db, K, gh, gw, in_lw, in_lb};
    *VT_OP_P(nd, la_p) = p;
    /* KV = KᵀV (n·d² per head), Q·KV (N·d²), Q·m (N·d): the plain chain's three matmuls (the focus: 0 MACs); the
     * fused DWC's K² per grid output, and a LePE's 9 (as its own conv counts them) */
    nd->macs = (int64_t)B * heads * ((int64_t)n * d * d + (int64_t)N * d * d + (int64_t)N * d) +
               (dw ? (int64_t)B * gh * gw * C * K * K : 0) + (lw ? 9LL * B * gh * gw * C : 0);
    nd->bwd_twice = 1;
    const int64_t L = (int64_t)d * d + d, HL = (int64_t)heads * L;
    const int64_t fw = (g->training ? 0 : (int64_t)B * HL) + (p.sk > 1 ? (int64_t)B * p.sk * HL : 0) +
                       (focus ? C + (int64_t)nt * rb * C : 0) +
                       (dw ? (int64_t)(K * K + 1) * C + (int64_t)nt * rb * C : 0);
    if (g->training && !vt_node_save(nd, 0, (int64_t)B * HL)) return NULL;
    if (fw > 0 && !vt_node_work(nd, 0, fw)) return NULL;
    if (g->training) {
        const int64_t per_thread = 2 * LA_RB * d + (focus ? 2 * (int64_t)rb * (C + 1) : 0);
        const int64_t bw = (int64_t)B * p.sq * HL + (int64_t)nt * per_thread +
                           (focus ? 2LL * C + vt_focus_dsc_floats(nt, C) : 0);
        if (!vt_node_work(nd, 1, bw)) return NULL;
    }
    return nd->out;
}

vt_tensor *vt_linear_attention(vt_graph *g, vt_tensor *q, vt_tensor *k, vt_tensor *v, int heads, int v_off,
                               vt_tensor *add) {
    const vt_linattn_args la = {.heads = heads, .v_off = v_off, .add = add};
    if (vt_bad(g, 1, q)) return NULL;
    if (q->ndim == 3 && k && k->ndim == 3 && q->shape[2] != k->shape[2]) {
        char s1[64], s2[64];
        return vt_fail(g, "linear_attention", "q %s and k %s must have the same channels", vt_shape_str(q, s1, 64),
                       vt_shape_str(k, s2, 64));
    }
    return vt_linear_attention_ex(g, q, k, v, &la);
}
