/* Fused multi-head softmax attention on a packed qkv tensor (timm layout), equal to the plain composition
 * split_heads → matmul(q, kᵀ)·scale → softmax → matmul(·, v) → merge_heads (tests/test_ops_attention.c checks it),
 * without the head copies: each (batch, head) runs two strided sgemms over an N×N tile that stays in cache. */
#include <cblas.h>
#include <omp.h>
#include <string.h>

#include "mathfn.h"
#include "vitc/ops.h"

/* ia: 0 B, 1 N, 2 heads, 3 dh, 4 threads planned; fa[0] scale. save[0] = probabilities (train graphs). */

static void attn_fwd(vt_node *n) {
    const int B = n->ia[0], N = n->ia[1], H = n->ia[2], dh = n->ia[3], nt = n->ia[4], C = H * dh;
    const float scale = n->fa[0], *qkv = n->in[0]->data;
    float *out = n->out->data, *probs = n->save[0] ? n->save[0]->data : NULL, *ws = n->fws ? n->fws->data : NULL;
#pragma omp parallel for schedule(static) num_threads(nt)
    for (int bh = 0; bh < B * H; bh++) {
        const int b = bh / H, h = bh % H;
        const float *q = qkv + (size_t)b * N * 3 * C + (size_t)h * dh;
        float *s = probs ? probs + (size_t)bh * N * N : ws + (size_t)omp_get_thread_num() * N * N;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, N, dh, scale, q, 3 * C, q + C, 3 * C, 0.0f, s, N);
        for (int i = 0; i < N; i++) vt_softmax_row(s + (size_t)i * N, s + (size_t)i * N, N);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, dh, N, 1.0f, s, N, q + 2 * C, 3 * C, 0.0f,
                    out + (size_t)b * N * C + (size_t)h * dh, C);
    }
}

static void attn_bwd(vt_node *n) {
    const int B = n->ia[0], N = n->ia[1], H = n->ia[2], dh = n->ia[3], nt = n->ia[4], C = H * dh;
    const float scale = n->fa[0], *qkv = n->in[0]->data, *probs = n->save[0]->data, *dout = n->out->grad;
    float *dqkv = n->in[0]->grad, *ws = n->bws->data;
    if (!dqkv) return;
#pragma omp parallel for schedule(static) num_threads(nt)
    for (int bh = 0; bh < B * H; bh++) {
        const int b = bh / H, h = bh % H;
        const size_t base = (size_t)b * N * 3 * C + (size_t)h * dh;
        const float *q = qkv + base, *k = q + C, *v = q + 2 * C, *p = probs + (size_t)bh * N * N;
        const float *dO = dout + (size_t)b * N * C + (size_t)h * dh;
        float *dq = dqkv + base, *dk = dq + C, *dv = dq + 2 * C;
        float *dp = ws + (size_t)omp_get_thread_num() * N * N;
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, N, dh, N, 1.0f, p, N, dO, C, 1.0f, dv, 3 * C);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, N, dh, 1.0f, dO, C, v, 3 * C, 0.0f, dp, N);
        for (int i = 0; i < N; i++) { /* dS = P ⊙ (dP − Σⱼ dP⊙P) */
            float *r = dp + (size_t)i * N, dot = 0.0f;
            const float *pr = p + (size_t)i * N;
            for (int j = 0; j < N; j++) dot += r[j] * pr[j];
            for (int j = 0; j < N; j++) r[j] = pr[j] * (r[j] - dot);
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, dh, N, scale, dp, N, k, 3 * C, 1.0f, dq, 3 * C);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, N, dh, N, scale, dp, N, q, 3 * C, 1.0f, dk, 3 * C);
    }
}

static const vt_opdef op_attention = {"attention", attn_fwd, attn_bwd};

vt_tensor *vt_attention(vt_graph *g, vt_tensor *qkv, int heads, float scale) {
    if (vt_bad(g, 1, qkv)) return NULL;
    char s[64];
    if (qkv->ndim != 3 || heads <= 0 || qkv->shape[2] % (3 * heads))
        return vt_fail(g, "attention", "qkv %s must be (B, N, 3·C) with C divisible by %d heads",
                       vt_shape_str(qkv, s, 64), heads);
    const int B = qkv->shape[0], N = qkv->shape[1], C = qkv->shape[2] / 3, nt = omp_get_max_threads();
    int shape[3] = {B, N, C};
    vt_node *n = vt_new_node(g, &op_attention, &qkv, 1, vt_new_act(g, 3, shape));
    if (!n) return NULL;
    n->ia[0] = B;
    n->ia[1] = N;
    n->ia[2] = heads;
    n->ia[3] = C / heads;
    n->ia[4] = nt;
    n->fa[0] = scale;
    n->macs = 2LL * B * N * N * C;
    if (g->training) {
        vt_node_save(n, 0, (int64_t)B * heads * N * N);
        vt_node_work(n, 1, (int64_t)nt * N * N);
    } else {
        vt_node_work(n, 0, (int64_t)nt * N * N);
    }
    return n->out;
}
