/* The fused attention ops (plain and MSF): finite-difference gradients, and equality with the plain op chains
 * (forward and gradients, train and eval graphs); the exported probabilities (vitc attention) against the chain's
 * softmax, with the output unchanged; the inline exp/erf against double-precision libm. */
#include <float.h>
#include <math.h>
#include <omp.h>
#include <string.h>

#include "../src/ops/mathfn.h"
#include "gradcheck.h"
#include "vitc/ops.h"

/* The fused op on a packed qkv (B, N, 3C), or with msf qkvp (B, N, 4C), as the ViT and MSF blocks build it: chunks
 * q, k, v (and the probe p) of C channels each, head h taking channels h·dh + [0, dh) of each. */
static vt_tensor *packed(vt_graph *g, vt_tensor *qkv, int heads, float scale, int msf) {
    const int C = qkv->shape[2] / (msf ? 4 : 3);
    const vt_attn_args a = {.heads = heads, .dim = C, .k_off = C, .v_off = 2 * C, .p_off = 3 * C, .scale = scale,
                            .msf = msf};
    return vt_attention_ex(g, qkv, NULL, &a);
}

static vt_tensor *b_attn(vt_graph *g, vt_tensor **x, const gc_case *c) {
    return packed(g, x[0], c->ia[0], c->fa[0], c->ia[1]);
}

/* The unfused chain: q·kᵀ·scale (MSF: − 0.5·scale·‖k‖² per key), softmax, ·v (MSF: − p), heads merged. */
static vt_tensor *plain(vt_graph *g, vt_tensor *qkv, int H, float scale, int msf) {
    const int C = qkv->shape[2] / (msf ? 4 : 3), dh = C / H;
    vt_tensor *q = vt_split_heads(g, qkv, 0, H, dh), *k = vt_split_heads(g, qkv, C, H, dh),
              *v = vt_split_heads(g, qkv, 2 * C, H, dh), *logits = vt_matmul(g, q, k, 0, 1, scale);
    if (msf) {
        const int ks[4] = {k->shape[0], H, 1, k->shape[2]};
        vt_tensor *kn = vt_scale(g, vt_mean(g, vt_mul(g, k, k), 3), 0.5f * scale * (float)dh); /* (B, H, N) */
        logits = vt_sub(g, logits, vt_reshape(g, kn, 4, ks));
    }
    vt_tensor *o = vt_matmul(g, vt_softmax(g, logits, -1), v, 0, 0, 1.0f);
    if (msf) o = vt_sub(g, o, vt_split_heads(g, qkv, 3 * C, H, dh));
    return vt_merge_heads(g, o);
}

/* Runs fused or plain attention on the same packed input and returns the output and the input's gradient; with
 * `other`, the keys' channels are added to the output too: a second reader made after the attention, whose gradient
 * reaches those channels first in backward, so the attention's dK must be added to it. */
static void run_ex(int fused, int msf, int train, int other, int B, int N, int H, int dh, float *out, float *grad) {
    vt_err e = {0};
    vt_params *P = vt_params_new(&e);
    vt_graph *g = vt_graph_new(P, train, &e);
    int s[3] = {B, N, (msf ? 4 : 3) * H * dh};
    vt_tensor *x = vt_param(g, "qkv", 3, s, (vt_init){VT_INIT_NORMAL, 1.0f});
    vt_tensor *y = fused ? packed(g, x, H, 0.4f, msf) : plain(g, x, H, 0.4f, msf);
    if (other) y = vt_add(g, y, vt_slice(g, x, 2, H * dh, H * dh));
    int rs[3] = {B, N, H * dh};
    vt_tensor *r = vt_input(g, "r", 3, rs);
    vt_graph_set_loss(g, vt_sum(g, vt_mul(g, y, r)));
    vt_graph_output(g, y);
    vt_graph_finalize(g, &e);
    vt_params_init(P, 5);
    for (int64_t i = 0; i < r->numel; i++) r->data[i] = (float)((i * 7919) % 13) / 13.0f - 0.5f;
    vt_graph_forward(g);
    memcpy(out, y->data, sizeof(float) * (size_t)y->numel);
    if (train) {
        vt_params_zero_grad(P);
        vt_graph_backward(g);
        memcpy(grad, x->grad, sizeof(float) * (size_t)x->numel);
    }
    vt_graph_free(g);
    vt_params_free(P);
}

static void run(int fused, int msf, int train, int B, int N, int H, int dh, float *out, float *grad) {
    run_ex(fused, msf, train, 0, B, N, H, dh, out, grad);
}

static void check_matches_plain(vt_test *T) {
    enum { B = 2, N = 17, H = 3, dh = 8 };
    static float o1[B * N * H * dh], o2[B * N * H * dh], g1[B * N * 4 * H * dh], g2[B * N * 4 * H * dh];
    for (int msf = 0; msf < 2; msf++)
        for (int train = 0; train < 2; train++) {
            run(1, msf, train, B, N, H, dh, o1, g1);
            run(0, msf, train, B, N, H, dh, o2, g2);
            const int ng = B * N * (msf ? 4 : 3) * H * dh;
            double eo = 0, eg = 0;
            for (size_t i = 0; i < sizeof o1 / sizeof o1[0]; i++) eo = t_worse(eo, fabs(o1[i] - o2[i]));
            for (int i = 0; train && i < ng; i++) eg = t_worse(eg, fabs(g1[i] - g2[i]));
            T_CHECK(T, eo < 1e-5 && eg < 1e-5, "fused vs plain (msf=%d, train=%d): output err %g, grad err %g", msf,
                    train, eo, eg);
        }
}

/* Fused attention on one packed input with probability export asked for (vt_attn_args.probs) in a graph with
 * export_maps = exp: its output into out, the exported probabilities into probs (when given), its arena size. */
static int64_t run_export(int msf, int exp, int train, int B, int N, int H, int dh, float *out, float *probs,
                          int *got_probs) {
    vt_err e = {0};
    vt_params *P = vt_params_new(&e);
    vt_graph *g = vt_graph_new(P, train, &e);
    g->export_maps = exp;
    const int C = H * dh, s[3] = {B, N, (msf ? 4 : 3) * C};
    vt_tensor *x = vt_param(g, "qkv", 3, s, (vt_init){VT_INIT_NORMAL, 1.0f}), *pr = NULL;
    const vt_attn_args a = {.heads = H, .dim = C, .k_off = C, .v_off = 2 * C, .p_off = 3 * C, .scale = 0.4f,
                            .msf = msf, .probs = &pr};
    vt_tensor *y = vt_attention_ex(g, x, NULL, &a);
    if (train) vt_graph_set_loss(g, vt_sum(g, y));
    vt_graph_output(g, y);
    vt_graph_finalize(g, &e);
    vt_params_init(P, 5);
    vt_graph_forward(g);
    memcpy(out, y->data, sizeof(float) * (size_t)y->numel);
    *got_probs = pr != NULL;
    if (pr && probs) memcpy(probs, pr->data, sizeof(float) * (size_t)pr->numel);
    const int64_t bytes = vt_graph_arena_bytes(g);
    vt_graph_free(g);
    vt_params_free(P);
    return bytes;
}

/* The plain chain's probabilities softmax(logits) (B, H, N, N) for the packed input of run_export. */
static void plain_probs(int msf, int B, int N, int H, int dh, float *probs) {
    vt_err e = {0};
    vt_params *P = vt_params_new(&e);
    vt_graph *g = vt_graph_new(P, 0, &e);
    const int C = H * dh, s[3] = {B, N, (msf ? 4 : 3) * C};
    vt_tensor *x = vt_param(g, "qkv", 3, s, (vt_init){VT_INIT_NORMAL, 1.0f});
    vt_tensor *q = vt_split_heads(g, x, 0, H, dh), *k = vt_split_heads(g, x, C, H, dh);
    vt_tensor *logits = vt_matmul(g, q, k, 0, 1, 0.4f);
    if (msf) {
        const int ks[4] = {B, H, 1, N};
        vt_tensor *kn = vt_scale(g, vt_mean(g, vt_mul(g, k, k), 3), 0.5f * 0.4f * (float)dh);
        logits = vt_sub(g, logits, vt_reshape(g, kn, 4, ks));
    }
    vt_tensor *p = vt_softmax(g, logits, -1);
    vt_graph_output(g, p);
    vt_graph_finalize(g, &e);
    vt_params_init(P, 5);
    vt_graph_forward(g);
    memcpy(probs, p->data, sizeof(float) * (size_t)p->numel);
    vt_graph_free(g);
    vt_params_free(P);
}

/* Export (for `vitc attention`): the exported probabilities equal the plain chain's softmax; the output is
 * bit-identical with and without export; without export_maps nothing is exported and the arena is unchanged. */
static void check_export(vt_test *T) {
    enum { B = 2, N = 13, H = 3, dh = 8 };
    static float o1[B * N * H * dh], o2[B * N * H * dh], p1[B * H * N * N], p2[B * H * N * N];
    for (int msf = 0; msf < 2; msf++)
        for (int train = 0; train < 2; train++) {
            int got_on, got_off;
            run_export(msf, 1, train, B, N, H, dh, o1, p1, &got_on);
            const int64_t bytes_off = run_export(msf, 0, train, B, N, H, dh, o2, NULL, &got_off);
            plain_probs(msf, B, N, H, dh, p2);
            float ep = 0.0f;
            for (int i = 0; i < B * H * N * N; i++) ep = fmaxf(ep, fabsf(p1[i] - p2[i]));
            T_CHECK(T, got_on && ep < 1e-6f, "exported probabilities (msf=%d, train=%d): max err %g vs the chain", msf,
                    train, ep);
            T_CHECK(T, memcmp(o1, o2, sizeof o1) == 0, "output changed by export (msf=%d, train=%d)", msf, train);
            /* the same op built without asking for probabilities: the arena of the default path */
            vt_err e = {0};
            vt_params *P = vt_params_new(&e);
            vt_graph *g = vt_graph_new(P, train, &e);
            const int s[3] = {B, N, (msf ? 4 : 3) * H * dh};
            vt_tensor *x = vt_param(g, "qkv", 3, s, (vt_init){VT_INIT_NORMAL, 1.0f});
            vt_tensor *y = packed(g, x, H, 0.4f, msf);
            if (train) vt_graph_set_loss(g, vt_sum(g, y));
            vt_graph_output(g, y);
            vt_graph_finalize(g, &e);
            T_CHECK(T, !got_off && bytes_off == vt_graph_arena_bytes(g),
                    "export off (msf=%d, train=%d): probabilities %d, arena %lld vs %lld bytes", msf, train, got_off,
                    (long long)bytes_off, (long long)vt_graph_arena_bytes(g));
            vt_graph_free(g);
            vt_params_free(P);
        }
}

/* Fewer (batch, head) pairs than 8 per thread and not a multiple of the threads (B·H = 3 on 2 threads): the forward
 * runs each pair's query rows in chunks (attn_p.nr in attention.c); outputs, gradients and exported probabilities
 * still match the plain chain. */
static void check_row_chunks(vt_test *T) {
    enum { B = 1, N = 17, H = 3, dh = 8 };
    static float o1[B * N * H * dh], o2[B * N * H * dh], g1[B * N * 4 * H * dh], g2[B * N * 4 * H * dh];
    static float p1[B * H * N * N], p2[B * H * N * N];
    const int saved = omp_get_max_threads();
    omp_set_num_threads(2);
    for (int msf = 0; msf < 2; msf++) {
        for (int mode = 0; mode < 3; mode++) { /* eval, train, train with the input's gradient added to */
            const int train = mode > 0, other = mode == 2;
            run_ex(1, msf, train, other, B, N, H, dh, o1, g1);
            run_ex(0, msf, train, other, B, N, H, dh, o2, g2);
            double eo = 0, eg = 0;
            for (size_t i = 0; i < sizeof o1 / sizeof o1[0]; i++) eo = t_worse(eo, fabs(o1[i] - o2[i]));
            for (int i = 0; train && i < B * N * (msf ? 4 : 3) * H * dh; i++) eg = t_worse(eg, fabs(g1[i] - g2[i]));
            T_CHECK(T, eo < 1e-5 && eg < 1e-5,
                    "row chunks vs plain (msf=%d, train=%d, other reader %d): output err %g, grad err %g", msf, train,
                    other, eo, eg);
        }
        int got;
        run_export(msf, 1, 0, B, N, H, dh, o1, p1, &got);
        plain_probs(msf, B, N, H, dh, p2);
        float ep = 0.0f;
        for (int i = 0; i < B * H * N * N; i++) ep = fmaxf(ep, fabsf(p1[i] - p2[i]));
        T_CHECK(T, got && ep < 1e-6f, "row chunks' exported probabilities (msf=%d): max err %g", msf, ep);
    }
    omp_set_num_threads(saved);
}

static void check_mathfn(vt_test *T) {
    double re = 0, ae = 0;
    for (double x = -87.0; x < 88.0; x += 0.001) {
        double r = exp((double)(float)x);
        re = t_worse(re, fabs(vt_expf((float)x) - r) / r);
    }
    for (double x = -7.0; x < 7.0; x += 1e-4) ae = t_worse(ae, fabs(vt_erff((float)x) - erf((double)(float)x)));
    T_CHECK(T, re < 2e-7, "vt_expf max relative error %g", re);
    T_CHECK(T, ae < 6e-7, "vt_erff max absolute error %g", ae);
    T_CHECK(T, isnan(vt_expf(NAN)) && isnan(vt_erff(NAN)), "NaN must propagate");
    T_CHECK(T, vt_expf(-1000.0f) < 1.2e-38f && vt_expf(0.0f) == 1.0f, "exp limits");
    /* vt_expf_le0 equals vt_expf bit for bit on x <= 0: every float from −90 to 0 spaced 1/4096 apart, the
     * subnormal range's edge, zero, −inf and NaN */
    int diff = 0;
    for (int i = 0; i <= 90 * 4096 && diff < 3; i++) {
        const float x = -(float)i / 4096.0f, a = vt_expf(x), b = vt_expf_le0(x);
        if (memcmp(&a, &b, sizeof a)) diff++, fprintf(stderr, "vt_expf_le0(%.9g) = %.9g, vt_expf %.9g\n", x, b, a);
    }
    const float edge[4] = {-87.33654f, -87.3365f, -INFINITY, -0.0f};
    for (int i = 0; i < 4; i++) {
        const float a = vt_expf(edge[i]), b = vt_expf_le0(edge[i]);
        diff += memcmp(&a, &b, sizeof a) != 0;
    }
    T_CHECK(T, diff == 0 && isnan(vt_expf_le0(NAN)), "vt_expf_le0 differs from vt_expf on %d arguments <= 0", diff);
#ifdef VT_VW
    /* its vector form (a degree-5 polynomial): within 1.8e-7 of e^x wherever that is a normal float, 0 below, NaN
     * kept */
    double ve = 0.0;
    int low = 0;
    float xs[VT_VW], ys[VT_VW];
    for (int i = 0; i < 90 * 65536; i += VT_VW) {
        for (int k = 0; k < VT_VW; k++) xs[k] = -(float)(i + k) / 65536.0f;
        VT_VPS(storeu)(ys, vt_vexpf_le0(VT_VPS(loadu)(xs)));
        for (int k = 0; k < VT_VW; k++) {
            const double r = exp((double)xs[k]);
            if (r >= 1.2e-38)
                ve = t_worse(ve, fabs(ys[k] - r) / r);
            else
                low += ys[k] > 1.2e-38f;
        }
    }
    for (int k = 0; k < VT_VW; k++) xs[k] = k ? -0.0f : NAN;
    VT_VPS(storeu)(ys, vt_vexpf_le0(VT_VPS(loadu)(xs)));
    T_CHECK(T, ve < 1.8e-7 && !low && isnan(ys[0]) && ys[1] == 1.0f,
            "vt_vexpf_le0: max relative error %g, %d results above the normals' range, NaN -> %g, e^-0 = %g", ve,
            low, ys[0], ys[1]);
#endif
}

/* The GELU kernels (vt_gelu_n, vt_gelu_fd_n, vt_gelu_bwd_n; vector body and padded tail) against double precision
 * (and its GELU output) on arrays of 1 to 40 floats over [-9, 9] and at the seams of its piecewise table: GELU within 5e-7 absolute, GELU'
 * within 1e-6 (up to ±FLT_MAX), GELU(x) = x or 0 at |x| >= 40; a value does not depend on
 * its position (the same x at offset 0 and inside a longer array gives the same bits); NaN propagates; ±inf give
 * GELU(+inf) = +inf, GELU(-inf) = NaN or 0 as the scalar vt_gelu_f (only NaN-ness is compared), and GELU'(±inf) NaN,
 * as the scalar vt_gelu_fd and PyTorch give. */
static void check_gelu_kernels(vt_test *T) {
    vt_rng s;
    vt_rng_seed(&s, 11);
    float x[48], y[48], d[48], y1[48], d1[48], dy[48], dx[48], y2[48];
    double ey = 0, ed = 0, eb = 0;
    int moved = 0, ybwd = 0;
    for (int n = 1; n <= 40; n++) {
        for (int j = 0; j < n; j++) x[j] = 18.0f * (vt_rng_uniform(&s) - 0.5f), dy[j] = vt_rng_uniform(&s) - 0.5f;
        vt_gelu_n(x, y, n);
        vt_gelu_fd_n(x, y1, d, n);
        for (int j = 0; j < n; j++) dx[j] = 1.0f;
        vt_gelu_bwd_n(x, y2, dy, dx, n, 1);
        ybwd += memcmp(y2, y, sizeof *y * (size_t)n) != 0; /* its GELU(x) output: vt_gelu_n's bits */
        for (int j = 0; j < n; j++) {
            const double v = x[j], cdf = 0.5 * (1.0 + erf(v / sqrt(2.0)));
            const double g = v * cdf, gd = cdf + v * exp(-0.5 * v * v) / sqrt(2.0 * 3.14159265358979323846);
            ey = t_worse(t_worse(ey, fabs(y[j] - g)), fabs(y1[j] - g));
            ed = t_worse(ed, fabs(d[j] - gd));
            eb = t_worse(eb, fabs(dx[j] - (1.0 + dy[j] * gd)));
        }
        vt_gelu_fd_n(x + n - 1, y1, d1, 1); /* the last value alone (the tail) equals its place in the array */
        moved += memcmp(y1, y + n - 1, sizeof *y) != 0 || memcmp(d1, d + n - 1, sizeof *d) != 0;
    }
    /* the piecewise table's seams (mathfn.h): every interval boundary k·5.5/16 and its last point 5.5, one float
     * either side, both signs; then large arguments, where GELU(x) is x or 0 */
    float z[4 * 17 * 3 + 8];
    int nz = 0;
    for (int k = 0; k <= 16; k++)
        for (int sg = -1; sg <= 1; sg += 2) {
            const float b = (float)sg * 5.5f * (float)k / 16.0f;
            z[nz++] = nextafterf(b, -INFINITY), z[nz++] = b, z[nz++] = nextafterf(b, INFINITY);
        }
    z[nz++] = 40.0f, z[nz++] = -40.0f, z[nz++] = 3e30f, z[nz++] = -3e30f;
    z[nz++] = 1e35f, z[nz++] = -1e35f, z[nz++] = FLT_MAX, z[nz++] = -FLT_MAX; /* GELU' exactly 1 or 0 there too */
    float zy[sizeof z / sizeof *z], zd[sizeof z / sizeof *z];
    vt_gelu_fd_n(z, zy, zd, nz);
    int far = 0;
    for (int j = 0; j < nz; j++) {
        const double v = z[j], cdf = 0.5 * erfc(-v / sqrt(2.0)), g = v * cdf;
        const double gd = cdf + v * exp(-0.5 * v * v) / sqrt(2.0 * 3.14159265358979323846);
        if (fabs(v) > 9.0) far += zy[j] != (float)g;
        else ey = t_worse(ey, fabs(zy[j] - g));
        ed = t_worse(ed, fabs(zd[j] - gd));
    }
    T_CHECK(T, far == 0, "vector GELU: %d of 8 large arguments not x or 0", far);
    T_CHECK(T, ey < 5e-7, "vector GELU max absolute error %g", ey);
    T_CHECK(T, ed < 1e-6 && eb < 2e-6, "vector GELU' max absolute error %g, backward %g", ed, eb);
    T_CHECK(T, moved == 0, "vector GELU: %d values changed with their position", moved);
    T_CHECK(T, ybwd == 0, "vt_gelu_bwd_n's GELU output differs from vt_gelu_n's on %d arrays", ybwd);
    const float sp[5] = {NAN, INFINITY, -INFINITY, 0.0f, -0.0f};
    vt_gelu_fd_n(sp, y, d, 5);
    int bad = 0;
    for (int j = 0; j < 5; j++) {
        float sd;
        const float sy = vt_gelu_fd(sp[j], &sd);
        bad += (isnan(y[j]) != 0) != (isnan(vt_gelu_f(sp[j])) != 0) || (isnan(y[j]) != 0) != (isnan(sy) != 0) ||
               (isnan(d[j]) != 0) != (isnan(sd) != 0);
    }
    T_CHECK(T, bad == 0 && isnan(d[0]) && isnan(d[1]) && isnan(d[2]) && y[1] == INFINITY && y[3] == 0.0f,
            "vector GELU special values: %d differ from the scalar's", bad);
}

/* vt_softmax_row and vt_softmax_bwd_row (vector body and the overlapping last vector, or scalar loops below a
 * vector) against double precision on rows of 1 to 40 and 197 values spread over 60 units (tiny probabilities
 * included), the forward also in place (y = x: the same floats); a NaN anywhere in a row makes the row NaN, −inf
 * gives 0. */
static void check_softmax_row(vt_test *T) {
    vt_rng s;
    vt_rng_seed(&s, 7);
    float x[197], y[197], g[197];
    double worst = 0, worst_b = 0;
    int moved = 0;
    for (int n = 1; n <= 198; n = n < 40 ? n + 1 : (n == 40 ? 197 : 199)) {
        for (int j = 0; j < n; j++) x[j] = 60.0f * (vt_rng_uniform(&s) - 0.5f);
        vt_softmax_row(x, y, n);
        double mx = x[0], sum = 0;
        for (int j = 1; j < n; j++) mx = fmax(mx, x[j]);
        for (int j = 0; j < n; j++) sum += exp((double)(x[j] - (float)mx)); /* the float difference, as the kernel */
        for (int j = 0; j < n; j++) {
            const double r = exp((double)(x[j] - (float)mx)) / sum;
            worst = t_worse(worst, fabs(y[j] - r) / (r + 1e-30));
        }
        double dot = 0;
        for (int j = 0; j < n; j++) {
            g[j] = 2.0f * vt_rng_uniform(&s) - 1.0f;
            dot += (double)g[j] * y[j];
        }
        float gb[197];
        memcpy(gb, g, sizeof(float) * (size_t)n);
        vt_softmax_bwd_row(y, gb, n);
        for (int j = 0; j < n; j++) /* relative to the terms' magnitude: g − dot may cancel */
            worst_b = t_worse(worst_b, fabs(gb[j] - y[j] * (g[j] - dot)) / (y[j] * (fabs(g[j]) + fabs(dot)) + 1e-30));
        vt_softmax_row(x, x, n);
        moved += memcmp(x, y, sizeof(float) * (size_t)n) != 0;
    }
    T_CHECK(T, worst < 1e-6, "softmax row max relative error %g", worst);
    T_CHECK(T, worst_b < 1e-6, "softmax backward row max relative error %g", worst_b);
    T_CHECK(T, moved == 0, "softmax row in place differs from out of place on %d rows", moved);
    for (int n = 1; n <= 20; n++)
        for (int at = 0; at < n; at += 3) {
            for (int j = 0; j < n; j++) x[j] = (float)j * 0.1f;
            x[at] = NAN;
            vt_softmax_row(x, y, n);
            int nan = 0;
            for (int j = 0; j < n; j++) nan += isnan(y[j]) != 0;
            T_CHECK(T, nan == n, "softmax row of %d with NaN at %d: %d NaN outputs", n, at, nan);
            x[at] = -INFINITY;
            if (n > 1) {
                vt_softmax_row(x, y, n);
                const int other = at == n - 1 ? 0 : n - 1;
                T_CHECK(T, y[at] < 1e-30f && y[other] > 0.0f, "softmax row of %d, -inf at %d", n, at);
            }
        }
}

void test_ops_attention(vt_test *T) {
    check_mathfn(T);
    check_gelu_kernels(T);
    check_softmax_row(T);
    check_matches_plain(T);
    check_export(T);
    check_row_chunks(T);
    gc_case cases[] = {
        {.name = "attention", .nx = 1, .ndim = {3}, .shape = {{2, 5, 18}}, .build = b_attn, .ia = {2}, .fa = {0.5f}},
        {.name = "attention_n1", .nx = 1, .ndim = {3}, .shape = {{1, 1, 12}}, .build = b_attn, .ia = {1}, .fa = {1}},
        {.name = "attention_eval", .nx = 1, .ndim = {3}, .shape = {{1, 4, 6}}, .build = b_attn, .ia = {2},
         .fa = {0.7f}, .eval = 0},
        {.name = "attention_msf", .nx = 1, .ndim = {3}, .shape = {{2, 5, 24}}, .build = b_attn, .ia = {2, 1},
         .fa = {0.5f}},
        {.name = "attention_msf_n1", .nx = 1, .ndim = {3}, .shape = {{1, 1, 8}}, .build = b_attn, .ia = {1, 1},
         .fa = {1}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) gc_run(T, &cases[i]);
}
