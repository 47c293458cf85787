/* Elementwise activations f(x): GELU (exact erf), ReLU, ReLU6, Hardswish, Softplus, x^p, sigmoid.
 *
 * MAC convention: elementwise ops count 0 MACs (only matmul-like products are counted; DESIGN.md §2).
 * Backward reads the op's input x (kept in train graphs) and follows PyTorch's gradient conventions at kinks:
 * ReLU 0 at x = 0; ReLU6 0 at x = 0 and x = 6 (hardtanh); Hardswish 0 for x < -3, (2x + 3)/6 for -3 <= x <= 3,
 * 1 for x > 3; Softplus (beta 1, threshold 20) is x for x > 20 with gradient 1 there.
 * GELU uses mathfn.h's vector kernels (within 5e-7 of erf's GELU): glibc's scalar erff made GELU ~14% of a DeiT-T
 * inference step (`vitc bench --profile`). */
#include <math.h>

#include "mathfn.h"
#include "vitc/ops.h"

/* Applies `expr` (in terms of v = x[i]) to every element into out[i] (= for forward, += for backward). */
#define MAP(out, OPER, expr)                                          \
    do {                                                              \
        _Pragma("omp parallel for schedule(static) if (N > VT_PAR_MIN)") \
        for (int64_t i = 0; i < N; i++) {                             \
            const float v = x[i];                                     \
            out[i] OPER(expr);                                        \
        }                                                             \
    } while (0)

static float sigmoidf(float v) {
    if (v >= 0.0f) return 1.0f / (1.0f + expf(-v));
    const float e = expf(v);
    return e / (1.0f + e);
}

static float powp(float v, float p) {
    if (p == 1.0f) return v;
    if (p == 2.0f) return v * v;
    if (p == 3.0f) return v * v * v;
    if (p == 0.5f) return sqrtf(v);
    if (p == -1.0f) return 1.0f / v;
    return powf(v, p);
}

/* The activation's kind and, for VT_POW, its exponent. */
typedef struct {
    vt_unary_kind kind;
    float p; /* exponent of VT_POW (0 for the other kinds) */
} unary_p;

static void unary_fwd(vt_node *n) {
    const unary_p *u = VT_OP_P(n, unary_p);
    const float *x = n->in[0]->data, p = u->p;
    float *y = n->out->data;
    const int64_t N = n->out->numel;
    switch (u->kind) {
    case VT_GELU: vt_gelu_all(x, y, NULL, N); break;
    case VT_RELU: MAP(y, =, vt_relu_f(v)); break;
    case VT_RELU6: MAP(y, =, vt_relu6_f(v)); break;
    case VT_HARDSWISH: MAP(y, =, vt_hswish_f(v)); break;
    case VT_SOFTPLUS: MAP(y, =, v > 20.0f ? v : log1pf(expf(v))); break;
    case VT_POW: MAP(y, =, powp(v, p)); break;
    case VT_SIGMOID: MAP(y, =, sigmoidf(v)); break;
    }
}

static void unary_bwd(vt_node *n) {
    const unary_p *u = VT_OP_P(n, unary_p);
    const float *x = n->in[0]->data, *dy = n->out->grad, p = u->p;
    float *dx = n->in[0]->grad;
    const int64_t N = n->out->numel;
    if (!dx || !dy) return;
    switch (u->kind) {
    case VT_GELU: vt_gelu_bwd_all(x, dy, dx, N, 1); break;
    case VT_RELU: MAP(dx, +=, v > 0.0f ? dy[i] : 0.0f); break;
    case VT_RELU6: MAP(dx, +=, dy[i] * vt_relu6_d(v)); break;
    case VT_HARDSWISH: MAP(dx, +=, dy[i] * vt_hswish_d(v)); break;
    case VT_SOFTPLUS: MAP(dx, +=, v > 20.0f ? dy[i] : dy[i] * sigmoidf(v)); break;
    case VT_POW:
        MAP(dx, +=, p == 0.0f ? 0.0f : p == 1.0f ? dy[i] : p == 2.0f ? 2.0f * v * dy[i] : dy[i] * p * powp(v, p - 1.0f));
        break;
    case VT_SIGMOID: {
        MAP(dx, +=, dy[i] * sigmoidf(v) * (1.0f - sigmoidf(v)));
        break;
    }
    }
}

#define X_READ VT_READS(VT_READS_IN(0)) /* every derivative here is a function of the input x */
static const vt_opdef op_unary[] = {
    [VT_GELU] = {"gelu", unary_fwd, unary_bwd, X_READ, NULL, VT_OP_OTHER},
    [VT_RELU] = {"relu", unary_fwd, unary_bwd, X_READ, NULL, VT_OP_OTHER},
    [VT_RELU6] = {"relu6", unary_fwd, unary_bwd, X_READ, NULL, VT_OP_OTHER},
    [VT_HARDSWISH] = {"hardswish", unary_fwd, unary_bwd, X_READ, NULL, VT_OP_OTHER},
    [VT_SOFTPLUS] = {"softplus", unary_fwd, unary_bwd, X_READ, NULL, VT_OP_OTHER},
    [VT_POW] = {"pow", unary_fwd, unary_bwd, X_READ, NULL, VT_OP_OTHER},
    [VT_SIGMOID] = {"sigmoid", unary_fwd, unary_bwd, X_READ, NULL, VT_OP_OTHER}};

vt_tensor *vt_unary(vt_graph *g, vt_tensor *x, vt_unary_kind kind, float p) {
    if (vt_bad(g, 1, x)) return NULL;
    if ((int)kind < 0 || (size_t)kind >= sizeof op_unary / sizeof op_unary[0])
        return vt_fail(g, "unary", "unknown activation kind %d", (int)kind);
    if (kind == VT_POW && !isfinite(p)) return vt_fail(g, "pow", "exponent %g is not finite", (double)p);
    vt_node *n = vt_new_node(g, &op_unary[kind], &x, 1, vt_new_act(g, x->ndim, x->shape));
    if (!n) return NULL;
    *VT_OP_P(n, unary_p) = (unary_p){kind, kind == VT_POW ? p : 0.0f};
    return n->out;
}

vt_tensor *vt_gelu(vt_graph *g, vt_tensor *x) { return vt_unary(g, x, VT_GELU, 0.0f); }

vt_tensor *vt_relu(vt_graph *g, vt_tensor *x) { return vt_unary(g, x, VT_RELU, 0.0f); }
