/* int8 linear layers (vt_graph.int8, the linear.onednn_int8 kernel): the kernel's output against this file's own
 * double-precision evaluation of the documented quantisation (gemm.h, vt_gemm_q8_linear) for every fused form
 * (bias, residual, ReLU, GELU after, GELU before), inputs all positive, all negative, constant and odd shapes; the
 * quantised result's distance from fp32; train graphs, weights made from inputs and forced OpenBLAS never take the
 * kernel; NaN and infinite inputs; a model's logits. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"
#include "vitc/model.h"
#include "vitc/ops.h"

enum { F_PLAIN, F_BIAS, F_RES, F_RELU, F_GELU, F_GELU_IN, F_COUNT };
static const char *const fname[F_COUNT] = {"plain", "bias", "bias + residual", "ReLU", "GELU after", "GELU before"};
enum { X_NORMAL, X_POSITIVE, X_NEGATIVE, X_ZERO };

static double gelu(double v) { return 0.5 * v * (1.0 + erf(v / sqrt(2.0))); }

/* The first linear node of g. */
static const vt_node *linear_node(const vt_graph *g) {
    for (int i = 0; i < g->nn; i++)
        if (strcmp(g->nodes[i]->op->name, "linear") == 0) return g->nodes[i];
    return NULL;
}

static int is_int8(const vt_node *n) { return n && n->kern && strcmp(n->kern->name, "linear.onednn_int8") == 0; }

/* Bytes [a, a + na) and [b, b + nb) overlap. */
static int overlap(const void *a, int64_t na, const void *b, int64_t nb) {
    const unsigned char *p = a, *q = b;
    return p < q + nb && q < p + na;
}

/* The int8 node ln's quantised input is planned scratch of dtype u8 (vt_kernel_work): xk bytes, 64-byte aligned in
 * the arena, apart from the node's input and output; the reference's forward scratch (GELU-before layers) is not
 * planned. */
static void check_scratch(vt_test *T, const vt_graph *g, const vt_node *ln, const vt_tensor *x, const vt_tensor *y,
                          int64_t xk) {
    const vt_tensor *k = ln->kws;
    T_CHECK(T, k && k->dtype == VT_U8 && k->numel == xk && k->data, "int8 scratch: %s",
            k ? "wrong type or size" : "none");
    if (!k || !k->data) return;
    const uint8_t *p = vt_tensor_u8(k);
    T_CHECK(T, p >= g->arena && p + xk <= g->arena + g->arena_bytes && (p - g->arena) % 64 == 0,
            "int8 scratch outside the arena or misaligned");
    T_CHECK(T, !overlap(p, xk, x->data, 4 * x->numel) && !overlap(p, xk, y->data, 4 * y->numel),
            "int8 scratch overlaps the layer's input or output");
    T_CHECK(T, !ln->fws || !ln->fws->data, "the reference's forward scratch was planned for the int8 kernel");
}

/* One (M, N, K) layer of form f in an int8 eval graph: the kernel is chosen, and its output equals the quantised
 * product within float rounding (GELU before the product: within two quantisation steps, as the library's erf and
 * libm's may round an input to neighbouring levels) and the fp32 product within the quantisation error. amx: the
 * plan's AMX flag, so that both forms of the matmul (scales as a post-op, or as run-time output scales) run on any
 * CPU. */
static void check_layer(vt_test *T, int M, int N, int K, int f, int xk, int amx, vt_rng *r) {
    const char *form = amx ? " (AMX form)" : "";
    vt_err e = {0};
    vt_params *P = vt_params_new(&e);
    vt_graph *g = P ? vt_graph_new(P, 0, &e) : NULL;
    T_CHECK(T, g != NULL, "graph: %s", e.msg);
    if (!g) {
        vt_params_free(P);
        return;
    }
    g->int8 = 1;
    T_CHECK(T, vt_gemm_plan_init(&g->gemm, "onednn", &e) == 0, "%s", e.msg); /* every shape, not the speed rule */
    g->gemm.amx = amx;
    int xs[2] = {M, K}, ws[2] = {N, K}, bs[1] = {N}, ys[2] = {M, N};
    vt_tensor *x = vt_input(g, "x", 2, xs), *res = f == F_RES ? vt_input(g, "r", 2, ys) : NULL;
    vt_tensor *w = vt_param(g, "w", 2, ws, (vt_init){VT_INIT_NORMAL, 0.3f});
    vt_tensor *b = f == F_PLAIN ? NULL : vt_param(g, "b", 1, bs, (vt_init){VT_INIT_NORMAL, 0.5f});
    vt_tensor *y = f == F_RELU       ? vt_linear_relu(g, x, w, b)
                   : f == F_GELU     ? vt_linear_gelu(g, x, w, b)
                   : f == F_GELU_IN  ? vt_gelu_linear(g, x, w, b)
                   : f == F_RES      ? vt_residual(g, res, vt_linear(g, x, w, b))
                                     : vt_linear(g, x, w, b);
    vt_graph_output(g, y);
    T_CHECK(T, vt_graph_finalize(g, &e) == 0, "finalize: %s", e.msg);
    if (e.msg[0]) goto done;
    const vt_node *ln = linear_node(g);
    if (g->gemm.onednn < VT_ISA_AVX2) { /* no int8 kernel below AVX2 (vt_gemm_q8_linear): the layer stays float */
        T_CHECK(T, ln && !is_int8(ln), "%dx%dx%d %s%s: an int8 kernel with oneDNN below AVX2", M, N, K, fname[f],
                form);
        goto done;
    }
    T_CHECK(T, is_int8(ln), "%dx%dx%d %s%s: kernel %s, not linear.onednn_int8", M, N, K, fname[f], form,
            ln && ln->kern ? ln->kern->name : "(reference)");
    if (!is_int8(ln)) goto done;
    check_scratch(T, g, ln, x, y, (int64_t)M * K);
    vt_params_init(P, 7 + (uint64_t)M);
    for (int i = 0; i < M * K; i++) {
        const float v = xk == X_ZERO ? 0.0f : 1.5f * vt_rng_normal(r);
        x->data[i] = xk == X_POSITIVE ? fabsf(v) + 0.1f : xk == X_NEGATIVE ? -fabsf(v) - 0.1f : v;
    }
    for (int i = 0; res && i < M * N; i++) res->data[i] = vt_rng_normal(r);
    double *xin = malloc(sizeof(double) * (size_t)M * K);
    int *xq = malloc(sizeof(int) * (size_t)M * K), *wq = malloc(sizeof(int) * (size_t)N * K);
    double *ws_ = malloc(sizeof(double) * (size_t)N);
    if (!xin || !xq || !wq || !ws_) goto freed;
    for (int round = 0; round < 2; round++) {
        if (round) { /* weights written in place: quantised (and packed) again at the next forward */
            for (int i = 0; i < N * K; i++) w->data[i] = 0.5f * w->data[i] - 0.1f;
            vt_params_changed(P);
        }
        vt_graph_forward(g);

        /* this file's evaluation of the documented rule */
        float lo = 0.0f, hi = 0.0f;
        for (int i = 0; i < M * K; i++) {
            xin[i] = f == F_GELU_IN ? gelu(x->data[i]) : x->data[i];
            lo = fminf(lo, x->data[i]);
            hi = fmaxf(hi, x->data[i]);
        }
        if (f == F_GELU_IN) { /* GELU's range over [lo, hi]: its minimum at -0.75179 when inside */
            const double glo = gelu(lo), ghi = gelu(hi), xmin = -0.7517916;
            hi = (float)fmax(glo, ghi);
            lo = (float)(lo < xmin && xmin < hi ? gelu(xmin) : fmin(glo, ghi));
            lo = fminf(lo, 0.0f);
        }
        const int L = vt_gemm_q8_levels(&g->gemm);
        const float sx = hi > lo ? (hi - lo) / 255.0f : 1.0f, inv = 1.0f / sx;
        const int zp = (int)lrintf(-lo * inv);
        for (int i = 0; i < M * K; i++) {
            const float v = (float)xin[i] * inv + (float)zp;
            xq[i] = v <= 0.0f ? 0 : v >= 255.0f ? 255 : (int)floorf(v + 0.5f);
        }
        for (int o = 0; o < N; o++) {
            double m = 0.0;
            for (int k = 0; k < K; k++) m = fmax(m, fabs(w->data[(size_t)o * K + k]));
            ws_[o] = m > 0.0 ? (float)m / (float)L : 1.0;
            for (int k = 0; k < K; k++)
                wq[(size_t)o * K + k] =
                    (int)lrintf(w->data[(size_t)o * K + k] * (m > 0.0 ? (float)L / (float)m : 0.0f));
        }
        double err = 0.0, errf = 0.0, scale = 1.0, step = 0.0;
        for (int i = 0; i < M; i++)
            for (int o = 0; o < N; o++) {
                long long acc = 0;
                double fp = 0.0, sw = 0.0, sxa = 0.0; /* Σ|ŵ|, Σ|x| of this output's dot product */
                for (int k = 0; k < K; k++) {
                    acc += (long long)(xq[(size_t)i * K + k] - zp) * wq[(size_t)o * K + k];
                    fp += xin[(size_t)i * K + k] * w->data[(size_t)o * K + k];
                    sw += ws_[o] * abs(wq[(size_t)o * K + k]);
                    sxa += fabs(xin[(size_t)i * K + k]);
                }
                const double add = (b ? b->data[o] : 0.0) + (res ? res->data[i * N + o] : 0.0);
                double q = (double)sx * ws_[o] * (double)acc;
                q += add;
                fp += add;
                if (f == F_RELU) q = fmax(q, 0.0), fp = fmax(fp, 0.0);
                if (f == F_GELU) q = gelu(q), fp = gelu(fp);
                err = t_worse(err, fabs(y->data[i * N + o] - q));
                /* |x̂ŵ − xw| ≤ |x̂ − x|·|ŵ| + |x|·|ŵ − w| with half steps sx/2 and s_o/2; GELU's slope is below 1.13 */
                const double qb = 1.13 * (0.5 * sx * sw + 0.5 * ws_[o] * sxa) + 1e-5 * (1.0 + fabs(fp));
                errf = t_worse(errf, fabs(y->data[i * N + o] - fp) / qb);
                scale = fmax(scale, fabs(q));
                step = fmax(step, (double)sx * ws_[o] * L);
            }
        const double tol = 2e-6 * scale * sqrt((double)K) + (f == F_GELU_IN ? 2.0 * step : 0.0);
        T_CHECK(T, err <= tol, "%dx%dx%d %s%s, input kind %d, weights %d: |int8 - quantised rule| %g > %g", M, N, K,
                fname[f], form, xk, round, err, tol);
        T_CHECK(T, errf <= 1.0, "%dx%dx%d %s%s, input kind %d, weights %d: |int8 - fp32| at %g of its bound", M, N, K,
                fname[f], form, xk, round, errf);
    }
freed:
    free(xin);
    free(xq);
    free(wq);
    free(ws_);
done:
    vt_graph_free(g);
    vt_params_free(P);
}

/* The kernel is for eval graphs of int8 graphs only, with a constant weight, not under VITC_GEMM=openblas, and
 * under the automatic rule not for one row without VNNI nor for a small layer (both measured slower); case 5 is the
 * rule's accepted control. */
static void check_refusals(vt_test *T) {
    for (int c = 0; c < 7; c++) {
        vt_err e = {0};
        vt_params *P = vt_params_new(&e);
        /* 0: train graph; 1: eval without int8; 2: forced OpenBLAS; 3: a weight computed from an input; 4: one row;
         * 6: 17 rows of 128 x 128 */
        vt_graph *g = vt_graph_new(P, c == 0, &e);
        if (c != 1) g->int8 = 1;
        vt_gemm_plan_init(&g->gemm, c == 2 ? "openblas" : c >= 4 ? "auto" : "onednn", &e);
        int xs[2] = {c == 4 ? 1 : c == 6 ? 17 : 64, c == 6 ? 128 : 192}, ws[2] = {c == 6 ? 128 : 256, xs[1]};
        vt_tensor *x = vt_input(g, "x", 2, xs), *w = vt_param(g, "w", 2, ws, (vt_init){VT_INIT_NORMAL, 0.3f});
        if (c == 3) w = vt_add(g, w, vt_input(g, "dw", 2, ws));
        vt_tensor *y = vt_linear(g, x, w, NULL);
        vt_graph_output(g, y);
        if (c == 0) vt_graph_set_loss(g, vt_mean(g, vt_mean(g, y, 1), 0));
        T_CHECK(T, vt_graph_finalize(g, &e) == 0, "finalize: %s", e.msg);
        const int vnni_row = c == 4 && g->gemm.vnni; /* with VNNI one row of 256 x 192 runs int8 (measured faster) */
        if ((c == 5 || vnni_row) && g->gemm.onednn >= VT_ISA_AVX2)
            T_CHECK(T, is_int8(linear_node(g)), "case %d (%dx%dx%d) under the automatic rule ran fp32", c, xs[0],
                    ws[0], xs[1]);
        else if (c != 5)
            T_CHECK(T, !is_int8(linear_node(g)), "case %d chose the int8 kernel", c);
        vt_graph_free(g);
        vt_params_free(P);
    }
}

/* An int8 graph (oneDNN forced) of one linear layer y = x (16, 96) · wᵀ (w: 128 × 96, N(0, 0.3²)), GELU before the
 * product when gelu; finalized (a failure is checked), its parameters in *P. */
static vt_graph *q8_layer(vt_test *T, int gelu, vt_params **P, vt_tensor **x, vt_tensor **w, vt_tensor **y) {
    vt_err e = {0};
    *P = vt_params_new(&e);
    vt_graph *g = vt_graph_new(*P, 0, &e);
    g->int8 = 1;
    vt_gemm_plan_init(&g->gemm, "onednn", &e);
    int xs[2] = {16, 96}, ws[2] = {128, 96};
    *x = vt_input(g, "x", 2, xs);
    *w = vt_param(g, "w", 2, ws, (vt_init){VT_INIT_NORMAL, 0.3f});
    *y = gelu ? vt_gelu_linear(g, *x, *w, NULL) : vt_linear(g, *x, *w, NULL);
    vt_graph_output(g, *y);
    T_CHECK(T, vt_graph_finalize(g, &e) == 0, "finalize: %s", e.msg);
    return g;
}

/* Hostile inputs: a NaN or an infinity in x reaches the output as in fp32 (that run falls back to fp32), never a
 * finite-looking result, a crash or an undefined float-to-integer conversion (the ASan + UBSan run checks that). */
static void check_nonfinite(vt_test *T) {
    const float bad[3] = {NAN, INFINITY, -INFINITY};
    for (int k = 0; k < 6; k++) { /* k >= 3: GELU before the product (the fp32 run needs the scratch the plan left
                                   * out, vt_node_fallback) */
        vt_params *P;
        vt_tensor *x, *w, *y;
        vt_graph *g = q8_layer(T, k >= 3, &P, &x, &w, &y);
        if (is_int8(linear_node(g))) {
            vt_params_init(P, 3);
            for (int i = 0; i < 16 * 96; i++) x->data[i] = (float)(i % 7) - 3.0f;
            x->data[5 * 96 + 17] = bad[k % 3];
            vt_graph_forward(g);
            int nonfinite = 0;
            for (int i = 0; i < 16 * 128; i++) nonfinite += !isfinite(y->data[i]);
            T_CHECK(T, nonfinite > 0, "input %g (form %d): every output finite", (double)bad[k % 3], k / 3);
            T_CHECK(T, is_int8(linear_node(g)), "input %g (form %d): the int8 kernel was dropped for later runs",
                    (double)bad[k % 3], k / 3);
        }
        vt_graph_free(g);
        vt_params_free(P);
    }
}

/* Finite but extreme values: a weight row of 3e38 against inputs over [0, 7e4] makes the output scale (input step ×
 * weight step) overflow float, so that run falls back to fp32, whose products stay finite (the inputs its huge weight
 * meets are 0); a row of weights below 1e-37 (its inverse step overflows) quantises to zeros, not an undefined
 * conversion. The outputs equal the fp32 layer's within int8's error. */
static void check_extreme_weights(vt_test *T) {
    vt_params *P;
    vt_tensor *x, *w, *y;
    vt_graph *g = q8_layer(T, 0, &P, &x, &w, &y);
    if (is_int8(linear_node(g))) {
        vt_params_init(P, 3);
        for (int k = 0; k < 96; k++) w->data[k] = k == 0 ? 3e38f : 0.0f; /* row 0: one huge weight */
        for (int k = 0; k < 96; k++) w->data[96 + k] *= 1e-38f;          /* row 1: all below 1e-37 */
        for (int i = 0; i < 16 * 96; i++) x->data[i] = i % 96 == 0 ? 0.0f : (float)(i % 5) * 1.75e4f;
        vt_graph_forward(g);
        double worst = 0.0;
        int finite = 1;
        for (int m = 0; m < 16; m++)
            for (int n = 0; n < 128; n++) {
                double ref = 0.0;
                for (int k = 0; k < 96; k++) ref += (double)x->data[m * 96 + k] * w->data[n * 96 + k];
                finite &= isfinite(y->data[m * 128 + n]);
                worst = t_worse(worst, fabs(y->data[m * 128 + n] - ref) / 7e4 / 0.3 / 96);
            }
        T_CHECK(T, finite && worst < 2e-2, "extreme weights: outputs finite (%d) and near fp32 (%g)", finite, worst);
    }
    vt_graph_free(g);
    vt_params_free(P);
}

/* A whole model (`--dtype int8`): every linear layer runs int8 (the last block's class-token query weight is a slice
 * of a parameter), and the logits stay near the fp32 ones (within 5% of their range on random weights). */
static void check_model(vt_test *T) {
    vt_err e = {0};
    vt_model_cfg c = *vt_model_find("vit_fmnist_p7");
    float *out[2] = {NULL, NULL};
    vt_params *P = vt_params_new(&e);
    T_CHECK(T, P && vt_model_init_params(&c, P, 5, &e) == 0, "params: %s", e.msg);
    int B = 8, nk = 0, nl = 0, capable = 1;
    for (int q = 0; q < 2; q++) {
        c.arch.int8 = q;
        vt_graph *g = vt_graph_new(P, 0, &e);
        vt_gemm_plan_init(&g->gemm, "onednn", &e); /* every shape (the speed rule leaves 128×128 layers to fp32) */
        capable = g->gemm.onednn >= VT_ISA_AVX2; /* no int8 kernel below AVX2: the model stays float */
        vt_tensor *x, *y = vt_model_build(g, &c, B, &x);
        vt_graph_output(g, y);
        T_CHECK(T, vt_graph_finalize(g, &e) == 0, "finalize: %s", e.msg);
        vt_rng r;
        vt_rng_seed(&r, 11);
        for (int64_t i = 0; i < x->numel; i++) x->data[i] = vt_rng_normal(&r);
        vt_graph_forward(g);
        out[q] = malloc(sizeof(float) * (size_t)y->numel);
        if (out[q]) memcpy(out[q], y->data, sizeof(float) * (size_t)y->numel);
        for (int i = 0; q && i < g->nn; i++) {
            nl += strcmp(g->nodes[i]->op->name, "linear") == 0;
            nk += is_int8(g->nodes[i]);
        }
        vt_graph_free(g);
    }
    T_CHECK(T, nl > 0 && nk == (capable ? nl : 0), "%d of %d linear layers ran int8 (oneDNN at AVX2 or above: %d)",
            nk, nl, capable);
    if (out[0] && out[1] && !capable) { /* float both: only the MLPs' GELU placement differs (int8 graphs keep it in
                                         * fc2's prologue) */
        double err = 0.0;
        for (int i = 0; i < B * 10; i++) err = t_worse(err, fabs(out[0][i] - out[1][i]));
        T_CHECK(T, err < 1e-5, "below AVX2 the int8 graph's logits differ from the float graph's by %g", err);
    } else if (out[0] && out[1]) {
        double err = 0.0, lo = INFINITY, hi = -INFINITY;
        for (int i = 0; i < B * 10; i++) {
            err = t_worse(err, fabs(out[0][i] - out[1][i]));
            lo = fmin(lo, out[0][i]);
            hi = fmax(hi, out[0][i]);
        }
        T_CHECK(T, err > 0.0 && err < 0.05 * (hi - lo), "logits int8 vs fp32: %g of a range %g", err, hi - lo);
    }
    free(out[0]);
    free(out[1]);
    vt_params_free(P);
}

void test_int8(vt_test *T) {
    vt_rng r;
    vt_rng_seed(&r, 29);
    static const int shapes[][3] = {{1, 10, 17}, {37, 29, 53}, {197, 64, 192}, {300, 96, 40}};
    for (int amx = 0; amx < 2; amx++) {
        for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
            for (int f = 0; f < F_COUNT; f++)
                check_layer(T, shapes[s][0], shapes[s][1], shapes[s][2], f, X_NORMAL, amx, &r);
        for (int xk = X_POSITIVE; xk <= X_ZERO; xk++) {
            check_layer(T, 33, 24, 48, F_BIAS, xk, amx, &r);
            check_layer(T, 33, 24, 48, F_GELU_IN, xk, amx, &r);
        }
    }
    check_refusals(T);
    check_nonfinite(T);
    check_extreme_weights(T);
    check_model(T);
}
