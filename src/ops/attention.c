/* Fused multi-head softmax attention on a packed projection (timm layout), equal to the plain composition
 * split_heads → matmul(q, kᵀ)·scale → softmax → matmul(·, v) → merge_heads (tests/test_ops_attention.c checks it),
 * without the head copies: each (batch, head) runs two strided sgemms over an N×N tile that stays in cache.
 * MSF mode (Kobayashi 2024, spec-msf §2): the packed input holds q, k, v, p; the logits are Gaussian-kernel ones,
 * scale·(q·kᵀ − 0.5‖k‖²) (the ‖k_j‖² term is a per-key shift of every row), and the PROBE p is subtracted after
 * attention: o = softmax·v − p. */
#include <omp.h>
#include <string.h>

#include "mathfn.h"
#include "vitc/ops.h"

/* ia: 0 B, 1 N, 2 heads, 3 dh, 4 threads planned, 5 MSF mode; fa[0] scale. save[0] = probabilities (train graphs).
 * Work: N×N logits per thread, plus N key norms (forward) or N column sums (backward) per thread. */

static void attn_fwd(vt_node *n) {
    const int B = n->ia[0], N = n->ia[1], H = n->ia[2], dh = n->ia[3], nt = n->ia[4], msf = n->ia[5], C = H * dh;
    const int ld = (msf ? 4 : 3) * C; /* row stride of the packed input */
    const float scale = n->fa[0], *qkv = n->in[0]->data;
    float *out = n->out->data, *probs = n->save[0] ? n->save[0]->data : NULL, *ws = n->fws->data;
    const vt_gemm_plan *gp = &n->g->gemm;
#pragma omp parallel for schedule(static) num_threads(nt)
    for (int bh = 0; bh < B * H; bh++) {
        const int b = bh / H, h = bh % H, t = omp_get_thread_num();
        const float *q = qkv + (size_t)b * N * ld + (size_t)h * dh, *k = q + C;
        float *s = probs ? probs + (size_t)bh * N * N : ws + (size_t)t * (N + 1) * N, *o = out + (size_t)b * N * C + h * dh;
        vt_gemm(gp, 0, 1, N, N, dh, scale, q, ld, k, ld, 0.0f, s, N);
        if (msf) {
            float *kn = ws + (size_t)t * (N + 1) * N + (size_t)N * N; /* −0.5·scale·‖k_j‖² */
            for (int j = 0; j < N; j++) {
                float a = 0.0f;
                for (int c = 0; c < dh; c++) a += k[(size_t)j * ld + c] * k[(size_t)j * ld + c];
                kn[j] = -0.5f * scale * a;
            }
            for (int i = 0; i < N; i++)
                for (int j = 0; j < N; j++) s[(size_t)i * N + j] += kn[j];
        }
        for (int i = 0; i < N; i++) vt_softmax_row(s + (size_t)i * N, s + (size_t)i * N, N);
        vt_gemm(gp, 0, 0, N, dh, N, 1.0f, s, N, q + 2 * C, ld, 0.0f, o, C);
        if (msf)
            for (int i = 0; i < N; i++)
                for (int c = 0; c < dh; c++) o[(size_t)i * C + c] -= q[(size_t)i * ld + 3 * C + c];
    }
}

static void attn_bwd(vt_node *n) {
    const int B = n->ia[0], N = n->ia[1], H = n->ia[2], dh = n->ia[3], nt = n->ia[4], msf = n->ia[5], C = H * dh;
    const int ld = (msf ? 4 : 3) * C;
    const float scale = n->fa[0], *qkv = n->in[0]->data, *probs = n->save[0]->data, *dout = n->out->grad;
    float *dqkv = n->in[0]->grad, *ws = n->bws->data;
    const vt_gemm_plan *gp = &n->g->gemm;
    if (!dqkv) return;
#pragma omp parallel for schedule(static) num_threads(nt)
    for (int bh = 0; bh < B * H; bh++) {
        const int b = bh / H, h = bh % H, t = omp_get_thread_num();
        const size_t base = (size_t)b * N * ld + (size_t)h * dh;
        const float *q = qkv + base, *k = q + C, *v = q + 2 * C, *p = probs + (size_t)bh * N * N;
        const float *dO = dout + (size_t)b * N * C + (size_t)h * dh;
        float *dq = dqkv + base, *dk = dq + C, *dv = dq + 2 * C;
        float *dp = ws + (size_t)t * (N + 1) * N, *csum = dp + (size_t)N * N;
        if (msf) /* o = … − p */
            for (int i = 0; i < N; i++)
                for (int c = 0; c < dh; c++) dq[(size_t)i * ld + 3 * C + c] -= dO[(size_t)i * C + c];
        vt_gemm(gp, 1, 0, N, dh, N, 1.0f, p, N, dO, C, 1.0f, dv, ld);
        vt_gemm(gp, 0, 1, N, N, dh, 1.0f, dO, C, v, ld, 0.0f, dp, N);
        for (int i = 0; i < N; i++) { /* dS = P ⊙ (dP − Σⱼ dP⊙P) */
            float *r = dp + (size_t)i * N, dot = 0.0f;
            const float *pr = p + (size_t)i * N;
            for (int j = 0; j < N; j++) dot += r[j] * pr[j];
            for (int j = 0; j < N; j++) r[j] = pr[j] * (r[j] - dot);
        }
        vt_gemm(gp, 0, 0, N, dh, N, scale, dp, N, k, ld, 1.0f, dq, ld);
        vt_gemm(gp, 1, 0, N, dh, N, scale, dp, N, q, ld, 1.0f, dk, ld);
        if (msf) { /* the −0.5·scale·‖k_j‖² shift: dk_j −= scale·(Σᵢ dS_ij)·k_j */
            for (int j = 0; j < N; j++) csum[j] = 0.0f;
            for (int i = 0; i < N; i++)
                for (int j = 0; j < N; j++) csum[j] += dp[(size_t)i * N + j];
            for (int j = 0; j < N; j++)
                for (int c = 0; c < dh; c++) dk[(size_t)j * ld + c] -= scale * csum[j] * k[(size_t)j * ld + c];
        }
    }
}

static const vt_opdef op_attention = {"attention", attn_fwd, attn_bwd};
static const vt_opdef op_attention_msf = {"attention_msf", attn_fwd, attn_bwd};

static vt_tensor *attention(vt_graph *g, vt_tensor *qkv, int heads, float scale, int msf) {
    if (vt_bad(g, 1, qkv)) return NULL;
    char s[64];
    const int nch = msf ? 4 : 3;
    if (qkv->ndim != 3 || heads <= 0 || qkv->shape[2] % (nch * heads))
        return vt_fail(g, msf ? "attention_msf" : "attention", "%s %s must be (B, N, %d·C) with C divisible by %d heads",
                       msf ? "qkvp" : "qkv", vt_shape_str(qkv, s, 64), nch, heads);
    const int B = qkv->shape[0], N = qkv->shape[1], C = qkv->shape[2] / nch, nt = omp_get_max_threads();
    int shape[3] = {B, N, C};
    vt_node *n = vt_new_node(g, msf ? &op_attention_msf : &op_attention, &qkv, 1, vt_new_act(g, 3, shape));
    if (!n) return NULL;
    n->ia[0] = B;
    n->ia[1] = N;
    n->ia[2] = heads;
    n->ia[3] = C / heads;
    n->ia[4] = nt;
    n->ia[5] = msf;
    n->fa[0] = scale;
    n->macs = 2LL * B * N * N * C;
    if (g->training) vt_node_save(n, 0, (int64_t)B * heads * N * N);
    vt_node_work(n, 0, (int64_t)nt * (N + 1) * N);
    if (g->training) vt_node_work(n, 1, (int64_t)nt * (N + 1) * N);
    return n->out;
}

vt_tensor *vt_attention(vt_graph *g, vt_tensor *qkv, int heads, float scale) {
    return attention(g, qkv, heads, scale, 0);
}

vt_tensor *vt_attention_msf(vt_graph *g, vt_tensor *qkvp, int heads, float scale) {
    return attention(g, qkvp, heads, scale, 1);
}
