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
 * Threads: each pass is one parallel loop over (b, h, row chunk) tasks, chunked so that there are about 8 tasks per
 * thread even at batch 1 with 3 heads; the GEMMs inside run on one thread each. KV and dKV over row chunks are
 * per-chunk partial sums, reduced after the loop. */
#include <omp.h>
#include <stdio.h>
#include <string.h>

#include "vitc/gemm.h"
#include "vitc/ops.h"

#define LA_EPS 1e-6f  /* the official denominator epsilon (q·k̄ + 1e-6) */
#define LA_RB 128     /* rows per inner block: G and z·Q temporaries of LA_RB×d stay in L1/L2 */
#define LA_TASKS 8    /* target tasks per thread per pass (load balance at small batch × heads) */
#define LA_MINROWS 32 /* fewest rows in a chunk */

/* Inputs: in[0] q, in[1] k, in[2] v, in[3] add (if any). save[0]: per (b, h) KV (d×d) then m (d) (train graphs).
 * fws: KV and m (eval graphs), then the KV/m partial sums over key chunks (when sk > 1). bws: dKV/dm partial sums
 * over query chunks, then per thread two LA_RB×d temporaries. */
typedef struct {
    int B, N, n, C, H, d;
    int ldv, v_off;           /* v rows have ldv floats; head h's values at v_off + h·d */
    int Na;                   /* rows of the add input (the last Na output rows), 0 when none */
    int nt;                   /* threads */
    int sk, sq;               /* chunks per (b, h) over the n key rows and the N query rows */
    const vt_gemm_plan *gemm; /* the graph's GEMM dispatch */
} la_p;

/* Chunks per (b, h) for `rows` rows: about LA_TASKS·nt tasks in all, none under LA_MINROWS rows. */
static int chunks(int BH, int rows, int nt) {
    const int want = (LA_TASKS * nt + BH - 1) / BH, most = (rows + LA_MINROWS - 1) / LA_MINROWS;
    const int s = want < most ? want : most;
    return s > 1 ? s : 1;
}

static inline int chunk_start(int s, int S, int rows) { return (int)((int64_t)s * rows / S); }

static inline size_t per_bh(const la_p *a) { return (size_t)a->d * a->d + (size_t)a->d; }

/* Pass 1 task: the partial KV (d×d, scaled 1/n) and m (d) of key rows [j0, j1) of (b, h) into kv (m at kv + d²). */
static void kv_chunk(const la_p *a, const float *k, const float *v, int b, int h, int j0, int j1, float *kv) {
    const int C = a->C, d = a->d, rows = j1 - j0;
    const float inv_n = 1.0f / (float)a->n;
    const float *kb = k + ((size_t)b * a->n + j0) * C + (size_t)h * d;
    const float *vb = v + ((size_t)b * a->n + j0) * a->ldv + a->v_off + (size_t)h * d;
    vt_gemm(a->gemm, 1, 0, d, d, rows, inv_n, kb, C, vb, a->ldv, 0.0f, kv, d);
    float *m = kv + (size_t)d * d;
    for (int c = 0; c < d; c++) m[c] = 0.0f;
    for (int j = 0; j < rows; j++) {
        const float *kr = kb + (size_t)j * C;
#pragma omp simd
        for (int c = 0; c < d; c++) m[c] += kr[c];
    }
    for (int c = 0; c < d; c++) m[c] *= inv_n;
}

/* Sums S partial blocks of `len` floats (consecutive per (b, h)) into the first block of each (b, h). */
static void reduce_partials(float *part, int BH, int S, size_t len) {
    if (S <= 1) return;
#pragma omp parallel for schedule(static)
    for (int bh = 0; bh < BH; bh++) {
        float *dst = part + (size_t)bh * S * len;
        for (int s = 1; s < S; s++) {
            const float *src = dst + (size_t)s * len;
#pragma omp simd
            for (size_t e = 0; e < len; e++) dst[e] += src[e];
        }
    }
}

static void la_fwd(vt_node *nd) {
    const la_p *a = VT_OP_P(nd, la_p);
    const int B = a->B, H = a->H, BH = B * H, N = a->N, n = a->n, C = a->C, d = a->d, sk = a->sk, sq = a->sq;
    const size_t L = per_bh(a);
    const float *q = nd->in[0]->data, *k = nd->in[1]->data, *v = nd->in[2]->data;
    const float *add = a->Na ? nd->in[3]->data : NULL;
    float *o = nd->out->data;
    float *kvm = nd->save[0] ? nd->save[0]->data : nd->fws->data;   /* per (b, h): KV then m */
    float *part = nd->fws ? nd->fws->data + (nd->save[0] ? 0 : (size_t)BH * L) : NULL;
    /* pass 1: KV and m per (b, h), over key chunks (partials when sk > 1) */
#pragma omp parallel for schedule(static) num_threads(a->nt)
    for (int t = 0; t < BH * sk; t++) {
        const int bh = t / sk, s = t % sk;
        float *dst = sk > 1 ? part + (size_t)t * L : kvm + (size_t)bh * L;
        kv_chunk(a, k, v, bh / H, bh % H, chunk_start(s, sk, n), chunk_start(s + 1, sk, n), dst);
    }
    if (sk > 1) {
        reduce_partials(part, BH, sk, L);
        for (int bh = 0; bh < BH; bh++) memcpy(kvm + (size_t)bh * L, part + (size_t)bh * sk * L, sizeof(float) * L);
    }
    /* pass 2: o = (Q·KV)·z (+ add), over query chunks, written into the merged output */
    const int lead = N - a->Na;
#pragma omp parallel for schedule(static) num_threads(a->nt)
    for (int t = 0; t < BH * sq; t++) {
        const int bh = t / sq, s = t % sq, b = bh / H, h = bh % H;
        const float *KV = kvm + (size_t)bh * L, *m = KV + (size_t)d * d;
        const int i1 = chunk_start(s + 1, sq, N);
        for (int i0 = chunk_start(s, sq, N); i0 < i1; i0 += LA_RB) {
            const int rows = i1 - i0 < LA_RB ? i1 - i0 : LA_RB;
            const float *qb = q + ((size_t)b * N + i0) * C + (size_t)h * d;
            float *ob = o + ((size_t)b * N + i0) * C + (size_t)h * d;
            vt_gemm(a->gemm, 0, 0, rows, d, d, 1.0f, qb, C, KV, d, 0.0f, ob, C);
            for (int r = 0; r < rows; r++) {
                const float *qr = qb + (size_t)r * C;
                float *orow = ob + (size_t)r * C, den = 0.0f;
#pragma omp simd reduction(+ : den)
                for (int c = 0; c < d; c++) den += qr[c] * m[c];
                const float z = 1.0f / (den + LA_EPS);
                const int i = i0 + r;
                if (add && i >= lead) {
                    const float *ar = add + ((size_t)b * a->Na + (i - lead)) * C + (size_t)h * d;
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

static void la_bwd(vt_node *nd) {
    const la_p *a = VT_OP_P(nd, la_p);
    if (!nd->save[0] || !nd->bws) return; /* eval graph: nothing saved */
    const int B = a->B, H = a->H, BH = B * H, N = a->N, n = a->n, C = a->C, d = a->d, sk = a->sk, sq = a->sq;
    const size_t L = per_bh(a), dd = (size_t)d * d;
    const float *q = nd->in[0]->data, *k = nd->in[1]->data, *v = nd->in[2]->data, *dO = nd->out->grad;
    float *dq = nd->in[0]->grad, *dk = nd->in[1]->grad, *dv = nd->in[2]->grad;
    float *dadd = a->Na ? nd->in[3]->grad : NULL;
    if (!dO || (!dq && !dk && !dv && !dadd)) return;
    const float *kvm = nd->save[0]->data;
    float *part = nd->bws->data, *tmp = part + (size_t)BH * sq * L; /* dKV/dm partials, then per-thread temps */
    const int lead = N - a->Na;
    /* pass A (query chunks): dQ, d add, and the partial dKV, dm of each chunk */
#pragma omp parallel for schedule(static) num_threads(a->nt)
    for (int t = 0; t < BH * sq; t++) {
        const int bh = t / sq, s = t % sq, b = bh / H, h = bh % H;
        const float *KV = kvm + (size_t)bh * L, *m = KV + dd;
        float *dKV = part + (size_t)t * L, *dm = dKV + dd;
        float *G = tmp + (size_t)omp_get_thread_num() * 2 * LA_RB * d, *Qz = G + (size_t)LA_RB * d;
        memset(dKV, 0, sizeof(float) * L);
        const int i1 = chunk_start(s + 1, sq, N);
        for (int i0 = chunk_start(s, sq, N); i0 < i1; i0 += LA_RB) {
            const int rows = i1 - i0 < LA_RB ? i1 - i0 : LA_RB;
            const size_t off = ((size_t)b * N + i0) * C + (size_t)h * d;
            const float *qb = q + off, *gb = dO + off;
            vt_gemm(a->gemm, 0, 1, rows, d, d, 1.0f, gb, C, KV, d, 0.0f, G, d); /* G = dO·KVᵀ */
            for (int r = 0; r < rows; r++) {
                const float *qr = qb + (size_t)r * C, *Gr = G + (size_t)r * d;
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
                if (dq) {
                    float *dqr = dq + off + (size_t)r * C;
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
            if (dk || dv) /* dKV += (z∘Q)ᵀ·dO */
                vt_gemm(a->gemm, 1, 0, d, d, rows, 1.0f, Qz, d, gb, C, 1.0f, dKV, d);
        }
    }
    if (!dk && !dv) return;
    reduce_partials(part, BH, sq, L);
    /* pass B (key chunks): dK = V·dKVᵀ/n + dm/n, dV = K·dKV/n */
    const float inv_n = 1.0f / (float)n;
#pragma omp parallel for schedule(static) num_threads(a->nt)
    for (int t = 0; t < BH * sk; t++) {
        const int bh = t / sk, s = t % sk, b = bh / H, h = bh % H;
        const float *dKV = part + (size_t)bh * sq * L, *dm = dKV + dd;
        const int j0 = chunk_start(s, sk, n), rows = chunk_start(s + 1, sk, n) - j0;
        const size_t koff = ((size_t)b * n + j0) * C + (size_t)h * d;
        const size_t voff = ((size_t)b * n + j0) * a->ldv + a->v_off + (size_t)h * d;
        if (dk) {
            vt_gemm(a->gemm, 0, 1, rows, d, d, inv_n, v + voff, a->ldv, dKV, d, 1.0f, dk + koff, C);
            for (int j = 0; j < rows; j++) {
                float *dkr = dk + koff + (size_t)j * C;
#pragma omp simd
                for (int c = 0; c < d; c++) dkr[c] += dm[c] * inv_n;
            }
        }
        if (dv) vt_gemm(a->gemm, 0, 0, rows, d, d, inv_n, k + koff, C, dKV, d, 1.0f, dv + voff, a->ldv);
    }
}

static const vt_opdef op_linattn = {"linear_attention", la_fwd, la_bwd,
                                    VT_READS(VT_READS_IN(0) | VT_READS_IN(1) | VT_READS_IN(2)), NULL};

vt_tensor *vt_linear_attention(vt_graph *g, vt_tensor *q, vt_tensor *k, vt_tensor *v, int heads, int v_off,
                               vt_tensor *add) {
    if (vt_bad(g, 3, q, k, v) || (add && vt_bad(g, 1, add))) return NULL;
    char sq[64], sk[64], sv[64], sa[64] = "none";
    vt_shape_str(q, sq, 64);
    vt_shape_str(k, sk, 64);
    vt_shape_str(v, sv, 64);
    if (add) vt_shape_str(add, sa, 64);
    if (q->ndim != 3 || k->ndim != 3 || v->ndim != 3 || heads <= 0)
        return vt_fail(g, "linear_attention", "q %s, k %s, v %s must be (B, N, C), (B, n, C), (B, n, Lv); %d heads",
                       sq, sk, sv, heads);
    const int B = q->shape[0], N = q->shape[1], C = q->shape[2], n = k->shape[1], Lv = v->shape[2];
    if (C % heads || k->shape[0] != B || k->shape[2] != C || v->shape[0] != B || v->shape[1] != n || v_off < 0 ||
        v_off > Lv - C)
        return vt_fail(g, "linear_attention", "q %s, k %s, v %s must be (B, N, C), (B, n, C), (B, n, Lv) with C "
                       "divisible by %d heads and the values' channels [%d, %d + C) inside v", sq, sk, sv, heads,
                       v_off, v_off);
    if (add && (add->ndim != 3 || add->shape[0] != B || add->shape[1] > N || add->shape[2] != C))
        return vt_fail(g, "linear_attention", "add %s must be (B, Na, C) with Na <= N for q %s", sa, sq);
    /* the backward tasks write q's, k's, v's and add's gradients on different schedules: no two may share memory
     * (q and k may: their gradients are written in different passes) */
    vt_tensor *rq = vt_root(q), *rk = vt_root(k), *rv = vt_root(v), *ra = add ? vt_root(add) : NULL;
    if (rv == rq || rv == rk || (ra && (ra == rq || ra == rk || ra == rv)))
        return vt_fail(g, "linear_attention", "v %s%s%s shares memory with q %s or k %s", sv, add ? " or add " : "",
                       add ? sa : "", sq, sk);
    vt_tensor *in[4] = {q, k, v, add};
    const int shape[3] = {B, N, C};
    vt_node *nd = vt_new_node(g, &op_linattn, in, add ? 4 : 3, vt_new_act(g, 3, shape));
    if (!nd) return NULL;
    const int nt = g->threads, d = C / heads, BH = B * heads;
    la_p p = {B, N, n, C, heads, d, Lv, v_off, add ? add->shape[1] : 0, nt, chunks(BH, n, nt), chunks(BH, N, nt),
              &g->gemm};
    *VT_OP_P(nd, la_p) = p;
    /* KV = KᵀV (n·d² per head), Q·KV (N·d²), Q·m (N·d): the plain chain's three matmuls */
    nd->macs = (int64_t)B * heads * ((int64_t)n * d * d + (int64_t)N * d * d + (int64_t)N * d);
    const int64_t L = (int64_t)d * d + d;
    const int64_t fw = (g->training ? 0 : (int64_t)BH * L) + (p.sk > 1 ? (int64_t)BH * p.sk * L : 0);
    if (g->training && !vt_node_save(nd, 0, (int64_t)BH * L)) return NULL;
    if (fw > 0 && !vt_node_work(nd, 0, fw)) return NULL;
    if (g->training && !vt_node_work(nd, 1, (int64_t)BH * p.sq * L + (int64_t)nt * 2 * LA_RB * d)) return NULL;
    return nd->out;
}
