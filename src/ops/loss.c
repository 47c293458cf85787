/* Cross-entropy with label smoothing, soft-target cross-entropy (Mixup/CutMix targets), the full sum (used by tests and
 * simple objectives) and the mean cosine similarity of two tensors along dim 1 (Refiner's cos_reg term). */
#include <math.h>

#include "vitc/ops.h"

/* logits (B, K), labels (B,) as floats; out (1,) = mean_b sum_k -t_bk log p_bk; save[0] = softmax (B, K). */
typedef struct {
    int B, K;
    float eps; /* label smoothing */
} ce_p;

static void ce_fwd(vt_node *n) {
    const ce_p *c = VT_OP_P(n, ce_p);
    const int B = c->B, K = c->K;
    const float eps = c->eps, *x = n->in[0]->data, *lab = n->in[1]->data;
    float *p = n->save[0]->data;
    double total = 0.0;
#pragma omp parallel for schedule(static) reduction(+ : total)
    for (int b = 0; b < B; b++) {
        const float *xr = x + (size_t)b * K;
        float *pr = p + (size_t)b * K;
        float mx = xr[0];
        for (int k = 1; k < K; k++) mx = xr[k] > mx ? xr[k] : mx;
        double se = 0.0;
        for (int k = 0; k < K; k++) se += exp((double)xr[k] - mx);
        double lse = mx + log(se), mean_logp = 0.0;
        for (int k = 0; k < K; k++) {
            double lp = xr[k] - lse;
            pr[k] = (float)exp(lp);
            mean_logp += lp;
        }
        int y = (int)lab[b];
        double nll = (y >= 0 && y < K && (float)y == lab[b]) ? -(xr[y] - lse) : NAN;
        total += (1.0 - eps) * nll - eps * mean_logp / K;
    }
    n->out->data[0] = (float)(total / B);
}

static void ce_bwd(vt_node *n) {
    const ce_p *c = VT_OP_P(n, ce_p);
    const int B = c->B, K = c->K;
    const float eps = c->eps, *lab = n->in[1]->data, *p = n->save[0]->data;
    float *dx = n->in[0]->grad;
    if (!dx) return;
    const float gscale = n->out->grad[0] / B;
#pragma omp parallel for schedule(static)
    for (int b = 0; b < B; b++) {
        int y = (int)lab[b];
        for (int k = 0; k < K; k++) {
            float t = eps / K + (k == y ? 1.0f - eps : 0.0f);
            dx[(size_t)b * K + k] += gscale * (p[(size_t)b * K + k] - t);
        }
    }
}

/* A node of op on inputs in (n of them) whose output is one value (a loss, a sum); NULL on error (g's). */
static vt_node *scalar_node(vt_graph *g, const vt_opdef *op, vt_tensor **in, int n) {
    int one = 1;
    return vt_new_node(g, op, in, n, vt_new_act(g, 1, &one));
}

/* Backward reads the labels; the softmax is saved. */
static const vt_opdef op_ce = {"cross_entropy", ce_fwd, ce_bwd, VT_READS(VT_READS_IN(1)), NULL, VT_OP_OTHER};

vt_tensor *vt_cross_entropy(vt_graph *g, vt_tensor *logits, vt_tensor *labels, float smoothing) {
    if (vt_bad(g, 2, logits, labels)) return NULL;
    char a[64], b[64];
    if (logits->ndim != 2 || labels->ndim != 1 || labels->shape[0] != logits->shape[0])
        return vt_fail(g, "cross_entropy", "logits %s must be (B, K) and labels %s (B,)",
                       vt_shape_str(logits, a, 64), vt_shape_str(labels, b, 64));
    if (!(smoothing >= 0.0f && smoothing < 1.0f))
        return vt_fail(g, "cross_entropy", "label smoothing %g outside [0, 1)", (double)smoothing);
    vt_tensor *in[2] = {logits, labels};
    vt_node *n = scalar_node(g, &op_ce, in, 2);
    if (!n) return NULL;
    *VT_OP_P(n, ce_p) = (ce_p){logits->shape[0], logits->shape[1], smoothing};
    vt_node_save(n, 0, logits->numel);
    return n->out;
}

/* Soft-target cross-entropy (timm's SoftTargetCrossEntropy): logits (B, K), targets (B, K), out (1,) =
 * mean_b sum_k -t_bk log softmax(x_b)_k; save[0] = log-softmax (B, K). */
typedef struct {
    int B, K;
} soft_ce_p;

static void soft_ce_fwd(vt_node *n) {
    const soft_ce_p *c = VT_OP_P(n, soft_ce_p);
    const int B = c->B, K = c->K;
    const float *x = n->in[0]->data, *t = n->in[1]->data;
    float *lsm = n->save[0]->data;
    double total = 0.0;
#pragma omp parallel for schedule(static) reduction(+ : total)
    for (int b = 0; b < B; b++) {
        const float *xr = x + (size_t)b * K, *tr = t + (size_t)b * K;
        float *lr = lsm + (size_t)b * K;
        float mx = xr[0];
        for (int k = 1; k < K; k++) mx = xr[k] > mx ? xr[k] : mx;
        double se = 0.0;
        for (int k = 0; k < K; k++) se += exp((double)xr[k] - mx);
        const double lse = mx + log(se);
        double row = 0.0;
        for (int k = 0; k < K; k++) {
            const double lp = xr[k] - lse;
            lr[k] = (float)lp;
            row -= tr[k] * lp;
        }
        total += row;
    }
    n->out->data[0] = (float)(total / B);
}

/* d/dx_bk = g/B (p_bk sum_j t_bj - t_bk); d/dt_bk = -g/B log p_bk. */
static void soft_ce_bwd(vt_node *n) {
    const soft_ce_p *c = VT_OP_P(n, soft_ce_p);
    const int B = c->B, K = c->K;
    const float *t = n->in[1]->data, *lsm = n->save[0]->data;
    float *dx = n->in[0]->grad, *dt = n->in[1]->grad;
    const float gscale = n->out->grad[0] / B;
#pragma omp parallel for schedule(static)
    for (int b = 0; b < B; b++) {
        const float *tr = t + (size_t)b * K, *lr = lsm + (size_t)b * K;
        double ts = 0.0;
        for (int k = 0; k < K; k++) ts += tr[k];
        for (int k = 0; dx && k < K; k++) dx[(size_t)b * K + k] += gscale * (float)(exp((double)lr[k]) * ts - tr[k]);
        for (int k = 0; dt && k < K; k++) dt[(size_t)b * K + k] -= gscale * lr[k];
    }
}

/* Backward reads the targets; the log-softmax is saved. */
static const vt_opdef op_soft_ce = {"soft_cross_entropy", soft_ce_fwd, soft_ce_bwd, VT_READS(VT_READS_IN(1)), NULL,
                                   VT_OP_OTHER};

vt_tensor *vt_soft_cross_entropy(vt_graph *g, vt_tensor *logits, vt_tensor *targets) {
    if (vt_bad(g, 2, logits, targets)) return NULL;
    char a[64], b[64];
    if (logits->ndim != 2 || targets->ndim != 2 || targets->shape[0] != logits->shape[0] ||
        targets->shape[1] != logits->shape[1])
        return vt_fail(g, "soft_cross_entropy", "logits %s and targets %s must both be (B, K)",
                       vt_shape_str(logits, a, 64), vt_shape_str(targets, b, 64));
    vt_tensor *in[2] = {logits, targets};
    vt_node *n = scalar_node(g, &op_soft_ce, in, 2);
    if (!n) return NULL;
    *VT_OP_P(n, soft_ce_p) = (soft_ce_p){logits->shape[0], logits->shape[1]};
    n->macs = 0; /* elementwise: 0 MACs by the engine's convention (README) */
    vt_node_save(n, 0, logits->numel);
    return n->out;
}

static void sum_fwd(vt_node *n) {
    const float *x = n->in[0]->data;
    double s = 0.0;
#pragma omp parallel for schedule(static) reduction(+ : s)
    for (int64_t i = 0; i < n->in[0]->numel; i++) s += x[i];
    n->out->data[0] = (float)s;
}

static void sum_bwd(vt_node *n) {
    float *dx = n->in[0]->grad;
    if (!dx) return;
    const float d = n->out->grad[0];
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n->in[0]->numel; i++) dx[i] += d;
}

static const vt_opdef op_sum = {"sum", sum_fwd, sum_bwd, VT_READS(0), NULL, VT_OP_OTHER};

vt_tensor *vt_sum(vt_graph *g, vt_tensor *x) {
    if (vt_bad(g, 1, x)) return NULL;
    vt_node *n = scalar_node(g, &op_sum, &x, 1);
    return n ? n->out : NULL;
}

/* The mean over positions of the cosine similarity along dim 1 (torch.nn.CosineSimilarity(dim=1) then .mean()): a and
 * b (B, H, ...) hold at each (b, position) an H-vector; cos = a·b / (max(|a|, eps)·max(|b|, eps)), eps 1e-8. Positions
 * go in blocks of COS_BLK, each summed over H in place (contiguous rows); nothing saved, backward recomputes. */
typedef struct {
    int B, H;
    int64_t inner; /* positions per sample */
} cos_p;

enum { COS_BLK = 256 };
#define COS_EPS 1e-8

/* Dot products and squared norms over H of the block of positions from p0 of sample b; returns its length. */
static int cos_sums(const cos_p *c, const float *a, const float *bb, int b, int64_t p0, double *dot, double *na,
                    double *nb) {
    const int k = (int)(c->inner - p0 < COS_BLK ? c->inner - p0 : COS_BLK);
    for (int j = 0; j < k; j++) dot[j] = na[j] = nb[j] = 0.0;
    for (int h = 0; h < c->H; h++) {
        const size_t off = ((size_t)b * c->H + h) * (size_t)c->inner + (size_t)p0;
        const float *ar = a + off, *br = bb + off;
        for (int j = 0; j < k; j++) {
            dot[j] += (double)ar[j] * br[j];
            na[j] += (double)ar[j] * ar[j];
            nb[j] += (double)br[j] * br[j];
        }
    }
    return k;
}

static void cos_fwd(vt_node *n) {
    const cos_p *c = VT_OP_P(n, cos_p);
    const int64_t nblk = (c->inner + COS_BLK - 1) / COS_BLK;
    const float *a = n->in[0]->data, *bb = n->in[1]->data;
    double total = 0.0;
#pragma omp parallel for schedule(static) reduction(+ : total)
    for (int64_t t = 0; t < (int64_t)c->B * nblk; t++) {
        double dot[COS_BLK], na[COS_BLK], nb[COS_BLK];
        const int b = (int)(t / nblk);
        const int64_t p0 = t % nblk * COS_BLK;
        const int k = cos_sums(c, a, bb, b, p0, dot, na, nb);
        for (int j = 0; j < k; j++) total += dot[j] / (fmax(sqrt(na[j]), COS_EPS) * fmax(sqrt(nb[j]), COS_EPS));
    }
    n->out->data[0] = (float)(total / ((double)c->B * (double)c->inner));
}

/* d cos / d a_h = b_h / (|a| |b|) - cos · a_h / |a|² (a norm clamped at eps: a constant there), and alike for b. */
static void cos_bwd(vt_node *n) {
    const cos_p *c = VT_OP_P(n, cos_p);
    const int64_t nblk = (c->inner + COS_BLK - 1) / COS_BLK;
    const float *a = n->in[0]->data, *bb = n->in[1]->data;
    float *da = n->in[0]->grad, *db = n->in[1]->grad;
    const double g = (double)n->out->grad[0] / ((double)c->B * (double)c->inner);
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < (int64_t)c->B * nblk; t++) {
        double dot[COS_BLK], na[COS_BLK], nb[COS_BLK];
        const int b = (int)(t / nblk);
        const int64_t p0 = t % nblk * COS_BLK;
        const int k = cos_sums(c, a, bb, b, p0, dot, na, nb);
        for (int j = 0; j < k; j++) { /* dot becomes g/(|a||b|), na and nb the cos-term factors */
            const double ra = sqrt(na[j]), rb = sqrt(nb[j]), sa = fmax(ra, COS_EPS), sb = fmax(rb, COS_EPS);
            const double cs = dot[j] / (sa * sb);
            dot[j] = g / (sa * sb);
            na[j] = ra > COS_EPS ? g * cs / (sa * sa) : 0.0;
            nb[j] = rb > COS_EPS ? g * cs / (sb * sb) : 0.0;
        }
        for (int h = 0; h < c->H; h++) {
            const size_t off = ((size_t)b * c->H + h) * (size_t)c->inner + (size_t)p0;
            const float *ar = a + off, *br = bb + off;
            for (int j = 0; da && j < k; j++) da[off + j] += (float)(dot[j] * br[j] - na[j] * ar[j]);
            for (int j = 0; db && j < k; j++) db[off + j] += (float)(dot[j] * ar[j] - nb[j] * br[j]);
        }
    }
}

/* Backward reads both inputs. */
static const vt_opdef op_cos = {"cosine_mean", cos_fwd, cos_bwd, VT_READS(VT_READS_IN(0) | VT_READS_IN(1)), NULL,
                                VT_OP_OTHER};

vt_tensor *vt_cosine_mean(vt_graph *g, vt_tensor *a, vt_tensor *b) {
    if (vt_bad(g, 2, a, b)) return NULL;
    char sa[64], sb[64];
    int same = a->ndim == b->ndim && a->ndim >= 2;
    for (int d = 0; same && d < a->ndim; d++) same = a->shape[d] == b->shape[d];
    if (!same || a == b)
        return vt_fail(g, "cosine_mean", "a %s and b %s must be two tensors of one shape (B, H, ...)",
                       vt_shape_str(a, sa, 64), vt_shape_str(b, sb, 64));
    vt_tensor *in[2] = {a, b};
    vt_node *n = scalar_node(g, &op_cos, in, 2);
    if (!n) return NULL;
    *VT_OP_P(n, cos_p) = (cos_p){a->shape[0], a->shape[1], a->numel / ((int64_t)a->shape[0] * a->shape[1])};
    n->macs = 0; /* elementwise products: 0 MACs by the engine's convention (README) */
    return n->out;
}
