/* The FFN at inference as one op, band by band, where the op chain (src/blocks/common.c) would take its hidden map
 * through memory:
 *   PVTv2's (spec-flatten §3, spec-hmhsa-cffn §3), vt_dwffn_eval: y (B, H·W, Co) = [r +] GELU(DW3x3(x·w1ᵀ + b1) +
 *   db)·w2ᵀ [+ b2]. The chain writes the hidden map (B, H·W, hid) to memory three times and reads it three times
 *   (fc1's output, the depthwise conv's input and output, fc2's input): PVTv2-b1's stage-1 hidden map is 103 MB at
 *   batch 16, and the depthwise conv ran at the host's memory bandwidth. Here a thread walks down one image (or a
 *   block of its rows) in bands of a few rows: fc1 for the rows the band's taps reach that it does not hold yet
 *   (one-thread GEMMs), the depthwise conv with GELU into a second band buffer, fc2 from it into y; both buffers stay
 *   in the core's caches.
 *   The plain MLP, vt_ffn_eval: y (R, Co) = [r +] GELU(x·w1ᵀ + b1)·w2ᵀ [+ b2], a band of rows at a time.
 * No backward: training graphs keep the chain. */
#include <omp.h>
#include <stdint.h>
#include <string.h>

#include "dwplane.h"
#include "resfuse.h"
#include "mathfn.h"
#include "vitc/gemm.h"
#include "vitc/ops.h"

typedef struct {
    int B, H, W, C, hid, Co;
    int rb;      /* output rows per band */
    int chunks;  /* row blocks per image: tasks are (image, block) pairs */
    int nt;      /* threads the scratch was sized for */
    int has_b2, res_in; /* in[6] is b2; r's input slot, -1 when absent */
    const vt_gemm_plan *gemm;
} dwffn_p;

/* Bands of at least 512 pixels (the GEMMs' rows); images split into row blocks until the tasks fill the threads
 * evenly or number four per thread. 512 against 128 pixels on an AMD EPYC Zen 5 (2026-12-02, per-node sums, best of
 * 4 alternated runs): PVTv2-b1 59.4 -> 55.1 ms a step at batch 16 and 3.5 -> 3.2 at batch 1, FLatten-PVTv2-b1 55.7 ->
 * 51.9, PVTv2-b1 + hMHSA + cFFN 51.8 -> 43.9 and 3.3 -> 3.0; 256 lost to 512 (0.92-0.96), 1024 was level with it. */
static void plan(dwffn_p *p) {
    p->rb = (512 + p->W - 1) / p->W;
    if (p->rb > p->H) p->rb = p->H;
    p->chunks = 1;
    while ((p->B * p->chunks) % p->nt && p->B * p->chunks < 4 * p->nt && p->chunks < p->H) p->chunks++;
}

/* Floats between two pixels of the band buffers: the hidden width and 16 more, so that pixels a power of two
 * apart in floats do not share the L1's few sets (in-cache rows of 56×512: 0.84 → 1.39 G outputs/s). */
static int hstride(const dwffn_p *p) { return p->hid + 16; }

/* Floats of one thread's scratch: the hidden rows a band reads (rb + 2) and the band's activations (rb). */
static size_t thread_floats(const dwffn_p *p) { return (size_t)(2 * p->rb + 2) * p->W * hstride(p); }

/* m rows of Co outputs at y = r + b (either may be NULL; nothing written when both are): what fc2's GEMM adds onto. */
static void out_init(float *y, const float *b, const float *r, int m, int Co) {
    for (int i = 0; i < m && (b || r); i++) {
        float *yi = y + (size_t)i * Co;
        const float *ri = r ? r + (size_t)i * Co : NULL;
        if (b && ri)
            for (int c = 0; c < Co; c++) yi[c] = ri[c] + b[c];
        else
            memcpy(yi, b ? b : ri, sizeof(float) * (size_t)Co);
    }
}

/* Output rows [t0, t1) of image b. hbuf holds the hidden rows [h0, h1) of the image between bands. */
static void dwffn_rows(const vt_node *n, const float *wt, int b, int t0, int t1, float *hbuf, float *abuf) {
    const dwffn_p *p = VT_OP_P(n, dwffn_p);
    const int H = p->H, W = p->W, C = p->C, hid = p->hid, Co = p->Co;
    const int hs = hstride(p);
    const size_t rowh = (size_t)W * hs, img = (size_t)H * W;
    const float *x = n->in[0]->data + (size_t)b * img * C, *w1 = n->in[1]->data, *b1 = n->in[2]->data;
    const float *db = n->in[4]->data, *w2 = n->in[5]->data, *b2 = p->has_b2 ? n->in[6]->data : NULL;
    const float *res = p->res_in >= 0 ? n->in[p->res_in]->data + (size_t)b * img * Co : NULL;
    float *y = n->out->data + (size_t)b * img * Co;
    int h0 = 0, h1 = 0; /* hidden rows held, from hbuf's first row */
    for (int o0 = t0; o0 < t1; o0 += p->rb) {
        const int o1 = o0 + p->rb < t1 ? o0 + p->rb : t1;
        const int n0 = o0 > 0 ? o0 - 1 : 0, n1 = o1 < H ? o1 + 1 : H; /* the hidden rows the band's taps read */
        if (h1 > n0 && h0 <= n0) { /* keep the rows already made (the previous band's last two) */
            memmove(hbuf, hbuf + (size_t)(n0 - h0) * rowh, sizeof(float) * (size_t)(h1 - n0) * rowh);
            h0 = n0;
        } else {
            h0 = h1 = n0;
        }
        if (n1 > h1) { /* fc1 for rows [h1, n1): bias rows, then the product added onto them */
            float *hr = hbuf + (size_t)(h1 - h0) * rowh;
            for (size_t i = 0; i < (size_t)(n1 - h1) * W; i++) memcpy(hr + i * hs, b1, sizeof(float) * (size_t)hid);
            vt_gemm(p->gemm, 0, 1, (n1 - h1) * W, hid, C, 1.0f, x + (size_t)h1 * W * C, C, w1, C, 1.0f, hr, hs);
            h1 = n1;
        }
        vt_dw_nhwc_rows(hbuf, hs, h0, H, W, hid, wt, 3, db, 1, abuf, hs, o0, o1);
        float *yr = y + (size_t)o0 * W * Co;
        const size_t m = (size_t)(o1 - o0) * W;
        out_init(yr, b2, res ? res + (size_t)o0 * W * Co : NULL, (int)m, Co);
        vt_gemm(p->gemm, 0, 1, (int)m, Co, hid, 1.0f, abuf, hs, w2, hid, b2 || res ? 1.0f : 0.0f, yr, Co);
    }
}

static void dwffn_fwd(vt_node *n) {
    const dwffn_p *p = VT_OP_P(n, dwffn_p);
    float *wt = n->fws->data, *scratch = wt + (size_t)9 * p->hid;
    const float *dw = n->in[3]->data;
    for (int c = 0; c < p->hid; c++) /* taps (hid, 3·3) -> (3·3, hid) */
        for (int k = 0; k < 9; k++) wt[(size_t)k * p->hid + c] = dw[(size_t)c * 9 + k];
    const int tasks = p->B * p->chunks, per = (p->H + p->chunks - 1) / p->chunks;
#pragma omp parallel num_threads(p->nt)
    {
        float *hbuf = scratch + (size_t)omp_get_thread_num() * thread_floats(p);
        float *abuf = hbuf + (size_t)(p->rb + 2) * p->W * hstride(p);
#pragma omp for schedule(dynamic, 1)
        for (int t = 0; t < tasks; t++) {
            const int b = t / p->chunks, t0 = t % p->chunks * per, t1 = t0 + per < p->H ? t0 + per : p->H;
            if (t0 < t1) dwffn_rows(n, wt, b, t0, t1, hbuf, abuf);
        }
    }
}

/* A GEMM fused with other work on its tiles, as the attention ops: the profile times its vt_gemm calls apart. */
static const vt_opdef op_dwffn = {"dwffn", dwffn_fwd, NULL, VT_READS(0), NULL, VT_OP_FUSED};

/* Every band's two products read both weights (repacked by each one-thread GEMM call) where the chain's layers read
 * them once, and save the hidden band's trips through memory. One FFN + residual, eval graphs alternated (medians of
 * 10 rounds, chain's time over the op's; AMD EPYC Zen 3, 2026-11-30): PVTv2-b1's stage 1 (56×56, 64 → 512 → 64)
 * 1.14 at batch 1, 1.22-1.28 at 2-8, 1.31 at 16 (cFFN's 64 → 512 → 37: 1.25 and 1.41); stage 2 (28×28, 128 → 1024)
 * 0.93 and 1.02 (cFFN 1.06), stage 3 (14×14, 320 → 1280) 0.82 and 0.94. So: where both weights, 4·(C + out)·hid
 * bytes, fit in 256 KB, a core's L2 next to the bands. Its products run in fp32 inside the bands, so a bf16 plan on an
 * AMX CPU (bf16 products 4-5x fp32's) takes the chain over at most 12544 rows: PVTv2-b1 --dtype bf16 with the chain
 * against the op (Intel Xeon with AMX, 2026-12-07, `bench/vitc_before_after.py`, best of 3 alternated rounds) 1.16,
 * 1.22, 1.11 at batch 1, 2, 4 (3136 rows each), 0.98 and 1.00 at 8 and 16; FLatten-PVTv2-b1 1.16 / 0.99 and its
 * hMHSA + cFFN variant 1.16 / 0.93 at batch 1 / 16. */
int vt_dwffn_wanted(const vt_graph *g, int64_t R, int C, int hid, int out) {
    if (g->gemm.bf16 && g->gemm.amx && R <= 12544) return 0;
    return !g->training && ((long long)C + out) * hid <= 65536;
}

vt_tensor *vt_dwffn_eval(vt_graph *g, vt_tensor *x, int H, int W, vt_tensor *w1, vt_tensor *b1, vt_tensor *dw,
                         vt_tensor *db, vt_tensor *w2, vt_tensor *b2) {
    if (vt_bad(g, 6, x, w1, b1, dw, db, w2)) return NULL;
    static const char *op = "dwffn";
    char sx[64];
    vt_shape_str(x, sx, sizeof sx);
    if (g->training) return vt_fail(g, op, "the fused FFN has no backward: training graphs use the op chain");
    if (x->ndim != 3 || H < 1 || W < 1 || (int64_t)H * W != x->shape[1])
        return vt_fail(g, op, "input %s must be (B, H·W = %d·%d, C)", sx, H, W);
    const int B = x->shape[0], C = x->shape[2], hid = w1->shape[0], Co = w2->shape[0];
    if (!vt_has_shape(w1, 2, hid, C, 0, 0) || !vt_has_shape(b1, 1, hid, 0, 0, 0) ||
        !vt_has_shape(dw, 4, hid, 1, 3, 3) || !vt_has_shape(db, 1, hid, 0, 0, 0) ||
        !vt_has_shape(w2, 2, Co, hid, 0, 0) || (b2 && !vt_has_shape(b2, 1, Co, 0, 0, 0)))
        return vt_fail(g, op,
                       "for input %s the weights must be fc1 (hid, %d), its bias (hid), the depthwise (hid, 1, 3, 3) "
                       "and its bias (hid), fc2 (out, hid) and its bias (out)", sx, C);
    vt_tensor *in[7] = {x, w1, b1, dw, db, w2, b2};
    const int ys[3] = {B, H * W, Co};
    vt_node *n = vt_new_node(g, &op_dwffn, in, b2 ? 7 : 6, vt_new_act(g, 3, ys));
    if (!n) return NULL;
    dwffn_p p = {B, H, W, C, hid, Co, 1, 1, g->threads, b2 != NULL, -1, &g->gemm};
    plan(&p);
    *VT_OP_P(n, dwffn_p) = p;
    n->macs = (int64_t)B * H * W * ((int64_t)C * hid + 9LL * hid + (int64_t)hid * Co);
    if (!vt_node_work(n, 0, (int64_t)(9 * (size_t)hid + (size_t)p.nt * thread_floats(&p)))) return NULL;
    return n->out;
}


/* ---- the plain MLP ---- */

typedef struct {
    int R, C, hid, Co;
    int nt;
    int has_b2, res_in; /* in[4] is b2; r's input slot, -1 when absent */
    const vt_gemm_plan *gemm;
} ffn_p;

/* Rows per band. On an AMD EPYC Zen 3 (2026-11-30), 64, 256, 512 and 1024 were no faster than 128 on Swin-T's stage-1
 * MLP; on a Zen 5 (1 MiB L2, 2026-12-02) 512 made the op 1.07-1.31x faster than 128 (per-node sums at batch 16,
 * best of 4 alternated runs; medians 1.05-1.35): GroupMixFormer-M 17.3 -> 15.4 ms a step, CSwin-T 33.1 -> 30.4,
 * Swin-T 49.4 -> 46.0, FLatten-Swin-T 50.2 -> 45.6, FLatten-PVT-T 55.7 -> 42.5; 1024 lost on GroupMixFormer-M. */
#define FFN_BAND 512

/* Floats of one thread's scratch: a band's hidden rows, hid + 16 floats apart (as dwffn's). */
static size_t ffn_thread_floats(const ffn_p *p) { return (size_t)FFN_BAND * (size_t)(p->hid + 16); }

static void ffn_fwd(vt_node *n) {
    const ffn_p *p = VT_OP_P(n, ffn_p);
    const int C = p->C, hid = p->hid, Co = p->Co, hs = hid + 16, nb = (p->R + FFN_BAND - 1) / FFN_BAND;
    const float *x = n->in[0]->data, *w1 = n->in[1]->data, *b1 = n->in[2]->data, *w2 = n->in[3]->data;
    const float *b2 = p->has_b2 ? n->in[4]->data : NULL, *res = p->res_in >= 0 ? n->in[p->res_in]->data : NULL;
    float *y = n->out->data;
#pragma omp parallel num_threads(p->nt)
    {
        float *h = n->fws->data + (size_t)omp_get_thread_num() * ffn_thread_floats(p);
#pragma omp for schedule(dynamic, 1)
        for (int t = 0; t < nb; t++) {
            const int r0 = t * FFN_BAND, m = p->R - r0 < FFN_BAND ? p->R - r0 : FFN_BAND;
            for (int i = 0; i < m; i++) memcpy(h + (size_t)i * hs, b1, sizeof(float) * (size_t)hid);
            vt_gemm(p->gemm, 0, 1, m, hid, C, 1.0f, x + (size_t)r0 * C, C, w1, C, 1.0f, h, hs);
            for (int i = 0; i < m; i++) vt_gelu_n(h + (size_t)i * hs, h + (size_t)i * hs, hid);
            float *yr = y + (size_t)r0 * Co;
            out_init(yr, b2, res ? res + (size_t)r0 * Co : NULL, m, Co);
            vt_gemm(p->gemm, 0, 1, m, Co, hid, 1.0f, h, hs, w2, hid, b2 || res ? 1.0f : 0.0f, yr, Co);
        }
    }
}

static const vt_opdef op_ffn = {"ffn", ffn_fwd, NULL, VT_READS(0), NULL, VT_OP_FUSED};

/* Swin-T's stage-1 MLP (96 → 384 → 96 over 50,176 rows at batch 16) as the op: 63 against 73 ms per block; its other
 * stages (weights of 1.2-9.4 MB) 0.82-1.0× the chain's speed; at batch 1 (a 4.8 MB hidden map, in L3) whole eval
 * graphs with the op on every stage-1 MLP read 0.99× (medians of 10 alternated rounds). So: weights of at most
 * 512 KB (the L2 of a Zen 3 core) over a hidden map of at least 16 MiB, which the caches would not keep. With that
 * rule, eval graphs at batch 16 on the same AMD EPYC Zen 3 (2026-11-30), per-node sums over the stage-1 blocks,
 * eight alternated rounds: Swin-T 286 against 303 ms, FLatten-Swin-T 285 against 298, CSwin-T 101 against 104. A
 * bf16 plan on an AMX CPU takes the chain, whose products run bf16 (the op's run fp32): --dtype bf16 with the chain
 * against the op (Intel Xeon with AMX, 2026-12-07, best of 3 alternated rounds) Swin-T 1.09 / 1.01 at batch 4 / 16,
 * CSwin-T 0.99 / 1.08. */
int vt_ffn_wanted(const vt_graph *g, int64_t R, int C, int hid, int out) {
    if (g->gemm.bf16 && g->gemm.amx) return 0;
    return !g->training && ((long long)C + out) * hid <= 131072 && R * hid >= (1 << 22);
}

vt_tensor *vt_ffn_eval(vt_graph *g, vt_tensor *x, vt_tensor *w1, vt_tensor *b1, vt_tensor *w2, vt_tensor *b2) {
    if (vt_bad(g, 4, x, w1, b1, w2)) return NULL;
    static const char *op = "ffn";
    char sx[64];
    vt_shape_str(x, sx, sizeof sx);
    if (g->training) return vt_fail(g, op, "the fused FFN has no backward: training graphs use the op chain");
    const int C = x->shape[x->ndim - 1], hid = w1->shape[0], Co = w2->shape[0];
    if (!vt_has_shape(w1, 2, hid, C, 0, 0) || !vt_has_shape(b1, 1, hid, 0, 0, 0) ||
        !vt_has_shape(w2, 2, Co, hid, 0, 0) || (b2 && !vt_has_shape(b2, 1, Co, 0, 0, 0)) || x->numel / C > INT32_MAX)
        return vt_fail(g, op, "for input %s the weights must be fc1 (hid, %d), its bias (hid), fc2 (out, hid) and its "
                       "bias (out)", sx, C);
    vt_tensor *in[5] = {x, w1, b1, w2, b2};
    int ys[VT_MAXDIM];
    memcpy(ys, x->shape, sizeof ys);
    ys[x->ndim - 1] = Co;
    vt_node *n = vt_new_node(g, &op_ffn, in, b2 ? 5 : 4, vt_new_act(g, x->ndim, ys));
    if (!n) return NULL;
    const ffn_p p = {(int)(x->numel / C), C, hid, Co, g->threads, b2 != NULL, -1, &g->gemm};
    *VT_OP_P(n, ffn_p) = p;
    n->macs = (int64_t)p.R * ((int64_t)C * hid + (int64_t)hid * Co);
    if (!vt_node_work(n, 0, (int64_t)((size_t)p.nt * ffn_thread_floats(&p)))) return NULL;
    return n->out;
}

int vt_ffn_fusable(const vt_node *n) {
    return (n->op == &op_dwffn && VT_OP_P(n, dwffn_p)->res_in < 0) ||
           (n->op == &op_ffn && VT_OP_P(n, ffn_p)->res_in < 0);
}

void vt_ffn_take_residual(vt_node *n) {
    if (n->op == &op_dwffn)
        VT_OP_P(n, dwffn_p)->res_in = n->nin - 1;
    else
        VT_OP_P(n, ffn_p)->res_in = n->nin - 1;
}
