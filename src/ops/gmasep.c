/* GroupMixFormer's separable aggregator convs (SeparableConv2d: depthwise k×k, then pointwise 1×1, no biases;
 * spec-groupmixformer.md §4) on segments of the qkv linear's transposed output (3C, B, N) (vt_linear_t), C = 5s, read
 * in place: the chain (a sliced permute copying the segment's planes out, the depthwise conv, the pointwise conv)
 * passed the segment and the depthwise output through memory, forward and backward. A unit is an image; one work item
 * is a unit's conv (the 7×7 convs' first): its depthwise planes stay in the thread's cache for the pointwise GEMM.
 * Train graphs also keep them for the pointwise weight's gradient (save[0]; recomputing them in backward cost a fourth of the op's depthwise work): GroupMixFormer-M
 * training at batch 16, the op 0.57-0.64 → 0.52-0.54 s per 4 steps, the step 1.02-1.12× faster, the arena 1274 →
 * 1417 MiB (AMD EPYC Zen 4, 2026-12-03, 3 of 4 alternated rounds; the fourth's base run was disturbed). Inference
 * graphs use it for the non-attention branch (segment 4); the fused eval op (gmagg.c) covers segments 1 to 3 there.
 * Training graphs take segments 1 to 3 in one op whose output also holds segment 0's copy (vt_gma_separable_cat):
 * the four aggregator branches side by side, as their BatchNorms' concat wants them. */
#include <limits.h>
#include <omp.h>
#include <string.h>

#include "dwplane.h"
#include "vitc/gemm.h"
#include "vitc/ops.h"

typedef struct {
    int B, N, H, W, s, units, nt;
    int np;           /* separable convs: 1, or 3 (vt_gma_separable_cat: segments 1-3) */
    int seg[3], k[3]; /* each conv's segment and kernel */
    int cat;          /* vt_gma_separable_cat: segment 0's planes copied to channels [0, s), conv j's to (j + 1)·s */
    int keep;         /* train graphs: forward keeps the depthwise outputs (save[0], units × Σ cin × N) for dPW */
    int split;        /* fewer than SPLIT_ITEMS (unit, conv) items: work split by channels and columns (below) */
    const vt_gemm_plan *gemm;
} gsep_p;

/* Few (unit, conv) items, as the non-attention branch's one image at batch 1, left a thread idle through the whole
 * op (GroupMixFormer-M's batch-1 training step: those nodes took as long on 2 threads as on 1, 4% of the step). With
 * fewer than SPLIT_ITEMS items, forward runs the depthwise planes in chunks of SPLIT_CH channels into a shared buffer,
 * then the pointwise product in chunks of SPLIT_COLS columns; backward runs each item's channels in chunks of
 * SPLIT_CH (dPW's columns, dD's rows and the planes' backward are channel by channel). The choice and the chunks do
 * not depend on the thread count. GroupMixFormer-M at batch 1, the non-attention branch's four nodes: 0.071 -> 0.049
 * s per 30 training steps, 0.035 -> 0.023 s per 60 inference steps, about 1% of either step (`--profile`, AMD EPYC
 * Zen 4, 2026-12-06; whole steps level within the host's noise). */
#define SPLIT_ITEMS 4
#define SPLIT_CH 8
#define SPLIT_COLS 64

/* Input channels of a segment's conv: s, or 3s for segment 4. */
static int seg_cin(const gsep_p *p, int seg) { return seg < 4 ? p->s : 3 * p->s; }

/* Input channels of all the unit's convs together (the depthwise outputs' planes, kept with keep). */
static int unit_cin(const gsep_p *p) {
    int t = 0;
    for (int j = 0; j < p->np; j++) t += seg_cin(p, p->seg[j]);
    return t;
}

/* Output channels per unit. */
static int unit_ch(const gsep_p *p) { return p->cat ? 4 * p->s : p->s; }

/* Offset in qkv of input channel c of unit i of segment seg: segments 0-3 have the 3B images type·B + b of s
 * channels, segment 4 the B images of its Q, K and V parts side by side (3s channels type·s + c). */
static size_t plane_off(const gsep_p *p, int seg, int i, int c) {
    const int t = seg < 4 ? i / p->B : c / p->s, b = seg < 4 ? i % p->B : i, cc = seg < 4 ? c : c % p->s;
    return ((size_t)(t * 5 * p->s + seg * p->s + cc) * p->B + b) * p->N;
}

static size_t up16(size_t n) { return (n + 15) / 16 * 16; }

/* Floats of one thread's scratch: forward, the depthwise output and a padded plane per conv (each kernel size its
 * own: a plane's border stays zero only for its geometry); backward, besides those the depthwise output's gradient
 * and private weight-gradient sums per conv (pointwise s·cin, depthwise cin·k·k). */
static size_t dn_floats(const gsep_p *p) { return up16((size_t)seg_cin(p, p->seg[0]) * p->N); }
static size_t fwd_floats(const gsep_p *p) {
    size_t t = dn_floats(p);
    for (int j = 0; j < p->np; j++) t += up16(vt_dw_plane_scratch(p->H, p->W, p->k[j]));
    return t;
}
/* Floats before the threads' forward scratch: split and not kept, every unit's depthwise planes (shared). */
static size_t shared_floats(const gsep_p *p) {
    return p->split && !p->keep ? up16((size_t)p->units * (size_t)unit_cin(p) * (size_t)p->N) : 0;
}
static size_t pad_bwd(const gsep_p *p, int j) { return up16(vt_dw_plane_bwd_scratch(p->H, p->W, p->k[j])); }
static size_t sums_floats(const gsep_p *p, int j) {
    const size_t cin = (size_t)seg_cin(p, p->seg[j]);
    return up16((size_t)p->s * cin) + up16(cin * p->k[j] * p->k[j]);
}
static size_t bwd_floats(const gsep_p *p) {
    size_t t = 2 * dn_floats(p);
    for (int j = 0; j < p->np; j++) t += pad_bwd(p, j) + sums_floats(p, j);
    return t;
}

/* Floats before conv j's in a thread's scratch after the depthwise output(s): forward its padded plane (bwd = 0), or
 * backward its padded plane and weight-gradient sums (bwd = 1); and of the unit's depthwise planes before conv j's. */
static size_t conv_off(const gsep_p *p, int j, int bwd) {
    size_t o = 0;
    for (int i = 0; i < j; i++)
        o += bwd ? pad_bwd(p, i) + sums_floats(p, i) : up16(vt_dw_plane_scratch(p->H, p->W, p->k[i]));
    return o;
}
static size_t cin_before(const gsep_p *p, int j) {
    size_t c = 0;
    for (int i = 0; i < j; i++) c += (size_t)seg_cin(p, p->seg[i]);
    return c;
}

/* Work item w's conv *j and unit *i: the last conv (the largest kernel) of every unit first, for the threads' balance
 * (one item per image had the three images of a batch-1 step run 2 : 1 on two threads; GroupMixFormer-M training at
 * batch 1, the op 0.38-0.39 -> 0.34-0.36 s per 40 steps, AMD EPYC Zen 4, 2026-12-06, alternated `--profile` runs). */
static void item(const gsep_p *p, int w, int *j, int *i) {
    *j = p->np - 1 - w / p->units;
    *i = w % p->units;
}

/* D (cin, N) = the depthwise output of conv j on unit i. Each next plane is prefetched (vt_prefetch_floats): a
 * unit's planes lie B·N floats apart in qkv, so the hardware prefetchers only find each one when it is read.
 * GroupMixFormer-M training at batch 16 (8-channel segments, 56x56 planes), the op 0.29-0.44 → 0.26-0.27 s over 3
 * steps (three alternated `--profile` runs), -T 0.44-0.49 → 0.40-0.42 s over 2 (Zen 5, 2026-12-02). */
static void unit_dw(const gsep_p *p, int j, const float *qkv, const float *dw, int i, int c0, int c1, float *D,
                    float *pad) {
    const int K = p->k[j] * p->k[j], seg = p->seg[j];
    for (int c = c0; c < c1; c++) {
        if (c + 1 < c1) vt_prefetch_floats(qkv + plane_off(p, seg, i, c + 1), p->N);
        vt_dw_plane(qkv + plane_off(p, seg, i, c), p->H, p->W, p->k[j], dw + (size_t)c * K, 0.0f,
                    D + (size_t)(c - c0) * p->N, pad);
    }
}

/* Channel chunks of conv j (split mode). */
static int nchunks(const gsep_p *p, int j) { return (seg_cin(p, p->seg[j]) + SPLIT_CH - 1) / SPLIT_CH; }

/* Split mode's chunk w (of the units × Σ_j nchunks(j) chunks): unit *i, conv *j, channels [*c0, *c1). */
static void chunk(const gsep_p *p, int w, int *i, int *j, int *c0, int *c1) {
    *i = w % p->units;
    w /= p->units;
    for (*j = 0; w >= nchunks(p, *j); (*j)++) w -= nchunks(p, *j);
    const int cin = seg_cin(p, p->seg[*j]);
    *c0 = w * SPLIT_CH;
    *c1 = *c0 + SPLIT_CH < cin ? *c0 + SPLIT_CH : cin;
}

static int total_chunks(const gsep_p *p) {
    int t = 0;
    for (int j = 0; j < p->np; j++) t += nchunks(p, j);
    return p->units * t;
}

/* The depthwise planes of unit i's conv j: kept (save[0]) or, split and not kept, in the shared buffer sh. */
static float *unit_planes(const vt_node *n, const gsep_p *p, float *sh, int i, int j) {
    float *base = p->keep ? n->save[0]->data : sh;
    return base + ((size_t)i * unit_cin(p) + cin_before(p, j)) * p->N;
}

/* Split forward: the depthwise planes by channel chunks, then the pointwise products by column chunks. */
static void gsep_fwd_split(vt_node *n) {
    const gsep_p *p = VT_OP_P(n, gsep_p);
    const float *qkv = n->in[0]->data;
    const size_t per = fwd_floats(p), dn = dn_floats(p), N = (size_t)p->N, sh = shared_floats(p);
    const int ncol = (p->N + SPLIT_COLS - 1) / SPLIT_COLS;
#pragma omp parallel num_threads(p->nt)
    {
        float *D = n->fws->data + sh + (size_t)omp_get_thread_num() * per;
        memset(D + dn, 0, sizeof(float) * (per - dn)); /* the padded planes' borders */
#pragma omp for schedule(dynamic, 1)
        for (int w = 0; w < total_chunks(p); w++) {
            int i, j, c0, c1;
            chunk(p, w, &i, &j, &c0, &c1);
            unit_dw(p, j, qkv, n->in[1 + 2 * j]->data, i, c0, c1,
                    unit_planes(n, p, n->fws->data, i, j) + (size_t)c0 * N, D + dn + conv_off(p, j, 0));
        }
#pragma omp for schedule(dynamic, 1)
        for (int w = 0; w < p->units * p->np * ncol; w++) {
            const int i = w % p->units, j = w / p->units % p->np, n0 = w / (p->units * p->np) * SPLIT_COLS;
            const int cols = p->N - n0 < SPLIT_COLS ? p->N - n0 : SPLIT_COLS, cin = seg_cin(p, p->seg[j]);
            float *yi = n->out->data + (size_t)i * unit_ch(p) * N + (size_t)(p->cat ? j + 1 : 0) * p->s * N;
            vt_gemm(p->gemm, 0, 0, p->s, cols, cin, 1.0f, n->in[2 + 2 * j]->data, cin,
                    unit_planes(n, p, n->fws->data, i, j) + n0, p->N, 0.0f, yi + n0, p->N);
        }
    }
}

static void gsep_fwd(vt_node *n) {
    const gsep_p *p = VT_OP_P(n, gsep_p);
    if (p->split) {
        gsep_fwd_split(n);
        return;
    }
    const float *qkv = n->in[0]->data;
    const size_t per = fwd_floats(p), dn = dn_floats(p), N = (size_t)p->N;
#pragma omp parallel num_threads(p->nt)
    {
        float *D = n->fws->data + (size_t)omp_get_thread_num() * per;
        memset(D + dn, 0, sizeof(float) * (per - dn)); /* the padded planes' borders */
#pragma omp for schedule(dynamic, 1)
        for (int w = 0; w < p->units * p->np; w++) {
            int j, i;
            item(p, w, &j, &i);
            float *yi = n->out->data + (size_t)i * unit_ch(p) * N;
            float *Dk = p->keep ? n->save[0]->data + ((size_t)i * unit_cin(p) + cin_before(p, j)) * N : D;
            for (int c = 0; p->cat && j == 0 && c < p->s; c++)
                memcpy(yi + c * N, qkv + plane_off(p, 0, i, c), sizeof(float) * N);
            const int cin = seg_cin(p, p->seg[j]);
            unit_dw(p, j, qkv, n->in[1 + 2 * j]->data, i, 0, cin, Dk, D + dn + conv_off(p, j, 0));
            vt_gemm(p->gemm, 0, 0, p->s, p->N, cin, 1.0f, n->in[2 + 2 * j]->data, cin, Dk, p->N, 0.0f,
                    yi + (size_t)(p->cat ? j + 1 : 0) * p->s * N, p->N);
        }
    }
}

static void gsep_bwd(vt_node *n) {
    const gsep_p *p = VT_OP_P(n, gsep_p);
    const float *qkv = n->in[0]->data, *dy = n->out->grad;
    float *dq = n->in[0]->grad;
    int any = dq != NULL;
    for (int j = 0; j < p->np; j++) any |= n->in[1 + 2 * j]->grad || n->in[2 + 2 * j]->grad;
    if (!any) return;
    const int N = p->N;
    const size_t per = bwd_floats(p), dn = dn_floats(p);
    for (int t = 0; t < p->nt; t++) /* the padded planes' borders and the weight-gradient sums of every thread */
        memset(n->bws->data + (size_t)t * per + 2 * dn, 0, sizeof(float) * (per - 2 * dn));
#pragma omp parallel num_threads(p->nt)
    {
        float *D = n->bws->data + (size_t)omp_get_thread_num() * per, *dD = D + dn;
        /* static, round robin over the items, or split: the chunks (each thread's sums are then the same at every
         * run) */
        const int nw = p->split ? total_chunks(p) : p->units * p->np;
#pragma omp for schedule(static, 1)
        for (int w = 0; w < nw; w++) {
            int j, i, c0 = 0, c1;
            if (p->split) {
                chunk(p, w, &i, &j, &c0, &c1);
            } else {
                item(p, w, &j, &i);
                c1 = seg_cin(p, p->seg[j]);
            }
            const int cc = c1 - c0;
            const float *dyi = dy + (size_t)i * unit_ch(p) * N;
            const float *Dk = p->keep ? unit_planes(n, p, NULL, i, j) + (size_t)c0 * N : D;
            float *pad = dD + dn + conv_off(p, j, 1);
            for (int c = 0; p->cat && dq && j == 0 && c < p->s; c++) { /* segment 0's copy (cat: not split) */
                float *d = dq + plane_off(p, 0, i, c);
                const float *e = dyi + (size_t)c * N;
#pragma omp simd
                for (int m = 0; m < N; m++) d[m] += e[m];
            }
            const int seg = p->seg[j], cin = seg_cin(p, seg), K = p->k[j] * p->k[j];
            const float *dw = n->in[1 + 2 * j]->data, *pw = n->in[2 + 2 * j]->data;
            const float *dyj = dyi + (size_t)(p->cat ? j + 1 : 0) * p->s * N;
            float *tpw = pad + pad_bwd(p, j), *tdw = tpw + up16((size_t)p->s * cin);
            if (n->in[2 + 2 * j]->grad) { /* dPW's columns [c0, c1) += dY·Dᵀ, D kept by forward or recomputed */
                if (!p->keep) unit_dw(p, j, qkv, dw, i, c0, c1, D, pad);
                vt_gemm(p->gemm, 0, 1, p->s, cc, N, 1.0f, dyj, N, Dk, N, 1.0f, tpw + c0, cin);
            }
            const int gdw = n->in[1 + 2 * j]->grad != NULL;
            if (dq || gdw) {
                vt_gemm(p->gemm, 1, 0, cc, N, p->s, 1.0f, pw + c0, cin, dyj, N, 0.0f, dD, N); /* dD = PWᵀ·dY */
                for (int c = c0; c < c1; c++) { /* every unit's planes are its own: qkv's gradient is added to */
                    const size_t o = plane_off(p, seg, i, c);
                    if (c + 1 < c1) { /* the next plane of qkv and of its gradient, as unit_dw */
                        vt_prefetch_floats(qkv + plane_off(p, seg, i, c + 1), N);
                        if (dq) vt_prefetch_floats(dq + plane_off(p, seg, i, c + 1), N);
                    }
                    vt_dw_plane_bwd(qkv + o, dD + (size_t)(c - c0) * N, p->H, p->W, p->k[j], dw + (size_t)c * K,
                                    dq ? dq + o : NULL, 1, gdw ? tdw + (size_t)c * K : NULL, pad);
                }
            }
        }
    }
    for (int t = 0; t < p->nt; t++) { /* the threads' sums in a fixed order: the same gradients at every run */
        const float *pad = n->bws->data + (size_t)t * per + 2 * dn;
        for (int j = 0; j < p->np; j++) {
            const int cin = seg_cin(p, p->seg[j]), K = p->k[j] * p->k[j];
            const float *tpw = pad + pad_bwd(p, j), *tdw = tpw + up16((size_t)p->s * cin);
            float *gpw = n->in[2 + 2 * j]->grad, *gdw = n->in[1 + 2 * j]->grad;
            for (int e = 0; gpw && e < p->s * cin; e++) gpw[e] += tpw[e];
            for (int e = 0; gdw && e < cin * K; e++) gdw[e] += tdw[e];
            pad = tpw + sums_floats(p, j);
        }
    }
}

/* A GEMM fused with other work (each unit's pointwise GEMMs between its depthwise planes), as the attention ops: the
 * profile times its vt_gemm calls apart. */
static const vt_opdef op_gsep = {"gma_separable", gsep_fwd, gsep_bwd, VT_READS(VT_READS_ALL_IN), NULL, VT_OP_FUSED};

/* The op over the np convs (segments seg[j], weights dw[j], pw[j]); cat: vt_gma_separable_cat's layout. */
static vt_tensor *separable(vt_graph *g, vt_tensor *qkv, int np, const int *seg, int H, int W, vt_tensor *const *dw,
                            vt_tensor *const *pw, int cat) {
    static const char *op = "gma_separable";
    if (vt_bad(g, 1, qkv)) return NULL;
    for (int j = 0; j < np; j++)
        if (vt_bad(g, 2, dw[j], pw[j])) return NULL;
    char sq[64], sd[64], sp[64];
    vt_shape_str(qkv, sq, sizeof sq);
    if (qkv->ndim != 3 || H < 1 || W < 1 || (int64_t)H * W != qkv->shape[2] || qkv->shape[0] % 15)
        return vt_fail(g, op, "qkv %s must be (3C, B, H·W = %d·%d) with C a multiple of 5", sq, H, W);
    const int B = qkv->shape[1], N = qkv->shape[2], s = qkv->shape[0] / 15;
    gsep_p p = {.B = B, .N = N, .H = H, .W = W, .s = s, .units = seg[0] < 4 ? 3 * B : B, .nt = g->threads, .np = np,
                .cat = cat, .gemm = &g->gemm};
    vt_tensor *in[7] = {qkv};
    int64_t macs = 0;
    for (int j = 0; j < np; j++) {
        if (seg[j] < 1 || seg[j] > 4)
            return vt_fail(g, op, "segment %d: the separable convs read segments 1 to 4", seg[j]);
        const int cin = seg[j] < 4 ? s : 3 * s, k = dw[j]->ndim == 4 ? dw[j]->shape[2] : 0;
        vt_shape_str(dw[j], sd, sizeof sd);
        vt_shape_str(pw[j], sp, sizeof sp);
        if (k < 1 || k % 2 == 0 || !vt_has_shape(dw[j], 4, cin, 1, k, k))
            return vt_fail(g, op, "depthwise weight %s must be (%d, 1, k, k) with k odd for qkv %s, segment %d", sd,
                           cin, sq, seg[j]);
        if (!vt_has_shape(pw[j], 4, s, cin, 1, 1))
            return vt_fail(g, op, "pointwise weight %s must be (%d, %d, 1, 1) for qkv %s, segment %d", sp, s, cin, sq,
                           seg[j]);
        p.seg[j] = seg[j];
        p.k[j] = k;
        in[1 + 2 * j] = dw[j];
        in[2 + 2 * j] = pw[j];
        macs += (int64_t)p.units * N * cin * (k * k + s);
        p.keep |= g->training && pw[j]->requires_grad;
    }
    p.split = !cat && p.units * np < SPLIT_ITEMS; /* cat: 3B images and 3 convs, never fewer than 9 items */
    const int ys[4] = {p.units, unit_ch(&p), H, W};
    vt_node *n = vt_new_node(g, &op_gsep, in, 1 + 2 * np, vt_new_act(g, 4, ys));
    if (!n) return NULL;
    *VT_OP_P(n, gsep_p) = p;
    n->macs = macs;
    const int64_t fw = (int64_t)shared_floats(&p) + (int64_t)p.nt * (int64_t)fwd_floats(&p),
                  bw = (int64_t)p.nt * (int64_t)bwd_floats(&p);
    int grads = qkv->requires_grad;
    for (int j = 0; j < np; j++) grads |= dw[j]->requires_grad || pw[j]->requires_grad;
    if (fw > INT_MAX || (grads && bw > INT_MAX))
        return vt_fail(g, op, "qkv %s: the per-thread scratch is too large", sq);
    if (!vt_node_work(n, 0, fw)) return NULL;
    if (p.keep && !vt_node_save(n, 0, (int64_t)p.units * unit_cin(&p) * N)) return NULL;
    if (grads && !vt_node_work(n, 1, bw)) return NULL;
    return n->out;
}

vt_tensor *vt_gma_separable(vt_graph *g, vt_tensor *qkv, int seg, int H, int W, vt_tensor *dw, vt_tensor *pw) {
    return separable(g, qkv, 1, &seg, H, W, &dw, &pw, 0);
}

vt_tensor *vt_gma_separable_cat(vt_graph *g, vt_tensor *qkv, int H, int W, vt_tensor *const *dw, vt_tensor *const *pw) {
    static const int segs[3] = {1, 2, 3};
    return separable(g, qkv, 3, segs, H, W, dw, pw, 1);
}
