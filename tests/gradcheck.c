#include "gradcheck.h"

#include <math.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "vitc/ops.h"

/* Loss = sum(y · r) evaluated in double precision from the graph's forward output. */
static double host_loss(vt_graph *g, const vt_tensor *y, const float *r) {
    vt_graph_forward(g);
    double s = 0.0;
    for (int64_t i = 0; i < y->numel; i++) s += (double)y->data[i] * r[i];
    return s;
}

/* Builds case c into a new graph (training when train; keep_all as given) over a new store *P, finalized, with
 * the operands x[] and the probe r filled from a fixed seed; *y receives the op's output. act: the op sees each
 * differentiated operand through an identity node (vt_affine 1·x + 0), an activation whose gradient the op's
 * backward may write rather than add to (vt_node.grad_fresh). NULL (T_CHECK failed) if the build fails. */
static vt_graph *gc_build_lib(vt_test *T, const gc_case *c, int keep_all, int act, int train, const char *lib,
                              int ref_kernels, vt_params **P, vt_tensor **x, vt_tensor **y, vt_tensor **r, vt_rng *rng) {
    vt_err e = {0};
    *P = vt_params_new(&e);
    vt_graph *g = vt_graph_new(*P, train, &e);
    if (lib) { /* before any node exists: nothing has made primitives from the plan yet */
        vt_gemm_plan_free(&g->gemm);
        if (vt_gemm_plan_init(&g->gemm, lib, &e)) {
            T_CHECK(T, 0, "%s: GEMM plan %s: %s", c->name, lib, e.msg);
            vt_graph_free(g);
            vt_params_free(*P);
            return NULL;
        }
    }
    g->keep_all = keep_all;
    g->ref_kernels = ref_kernels;
    vt_rng_seed(rng, 1234);
    for (int i = 0; i < c->nx; i++) {
        char nm[16];
        snprintf(nm, sizeof nm, "x%d", i);
        x[i] = vt_param(g, nm, c->ndim[i], c->shape[i], (vt_init){VT_INIT_ZERO, 0});
    }
    vt_tensor *seen[GC_MAXX];
    for (int i = 0; i < c->nx; i++) seen[i] = act && !c->nograd[i] ? vt_affine(g, x[i], 1.0f, 0.0f) : x[i];
    *y = c->build(g, seen, c);
    int rshape[VT_MAXDIM] = {0};
    if (*y) memcpy(rshape, (*y)->shape, sizeof rshape);
    *r = *y ? vt_input(g, "r", (*y)->ndim, rshape) : NULL;
    vt_tensor *loss = vt_sum(g, vt_mul(g, *y, *r));
    vt_graph_set_loss(g, loss);
    vt_graph_output(g, *y);
    if (vt_graph_finalize(g, &e)) {
        T_CHECK(T, 0, "%s: build failed: %s", c->name, e.msg);
        vt_graph_free(g);
        vt_params_free(*P);
        return NULL;
    }
    for (int i = 0; i < c->nx; i++) {
        if (c->fill)
            c->fill(x[i]->data, x[i]->numel, i, rng);
        else
            for (int64_t j = 0; j < x[i]->numel; j++) x[i]->data[j] = vt_rng_normal(rng);
    }
    for (int64_t j = 0; j < (*r)->numel; j++) (*r)->data[j] = vt_rng_normal(rng);
    return g;
}

static vt_graph *gc_build_as(vt_test *T, const gc_case *c, int keep_all, int act, vt_params **P, vt_tensor **x,
                             vt_tensor **y, vt_tensor **r, vt_rng *rng) {
    return gc_build_lib(T, c, keep_all, act, !c->eval, NULL, 0, P, x, y, r, rng);
}

static vt_graph *gc_build(vt_test *T, const gc_case *c, int keep_all, vt_params **P, vt_tensor **x, vt_tensor **y,
                          vt_tensor **r, vt_rng *rng) {
    return gc_build_as(T, c, keep_all, 0, P, x, y, r, rng);
}

double gc_rel_diff(const float *a, const float *b, int64_t n, double floor) {
    double err = 0.0, mag = floor;
    for (int64_t j = 0; j < n; j++) {
        if (isfinite(b[j]) && !isfinite(a[j])) return INFINITY;
        err = t_worse(err, fabs((double)a[j] - b[j]));
        mag = fmax(mag, fabs((double)b[j]));
    }
    return err / mag;
}

/* The alternative kernels against the reference ones: the case built with every node on its op's own forward
 * (vt_graph.ref_kernels: no vt_kernel such as a oneDNN primitive), with each forced GEMM plan ("openblas":
 * OpenBLAS sgemm and no oneDNN kernel; "onednn": oneDNN wherever it can run), and on the oneDNN plan with every
 * node's kernel handed to the reference before the first run (vt_node_fallback: the forward scratch the plan left
 * out is made then) gives the output and gradients of the default plan (y, x: its forward and backward already
 * run) to float rounding (1e-4 of their scale). */
static void gc_check_kernels(vt_test *T, const gc_case *c, const vt_tensor *y, vt_tensor **x) {
    static const struct {
        const char *lib, *what;
        int ref, fallback;
    } runs[] = {{NULL, "reference kernels", 1, 0}, {"openblas", "openblas GEMM plan", 0, 0},
                {"onednn", "onednn GEMM plan", 0, 0}, {"onednn", "kernels handed to the reference", 0, 1}};
    for (int l = 0; l < 4; l++) {
        vt_params *P;
        vt_tensor *xl[GC_MAXX], *yl, *r;
        vt_rng rng;
        vt_graph *g = gc_build_lib(T, c, 0, 0, !c->eval, runs[l].lib, runs[l].ref, &P, xl, &yl, &r, &rng);
        if (!g) return;
        for (int i = 0; runs[l].fallback && i < g->nn; i++) {
            vt_node *n = g->nodes[i];
            if (!n->kern) continue;
            T_CHECK(T, vt_node_fallback(n, 1) == 0 && !n->kern && (!n->fws || n->fws->data),
                    "%s: node %d (%s) not handed to the reference", c->name, i, n->op->name);
        }
        vt_graph_forward(g);
        vt_params_zero_grad(P);
        vt_graph_backward(g);
        const double ey = gc_rel_diff(yl->data, y->data, y->numel, 1e-3);
        T_CHECK(T, ey <= 1e-4, "%s: output with the %s differs from the default's by %.3g of its scale", c->name,
                runs[l].what, ey);
        for (int i = 0; i < c->nx; i++) {
            if (!x[i]->grad || c->nograd[i]) continue;
            const double eg = gc_rel_diff(xl[i]->grad, x[i]->grad, x[i]->numel, 1e-3);
            T_CHECK(T, eg <= 1e-4, "%s: operand x%d's gradient with the %s differs from the default's by %.3g of "
                    "its scale", c->name, i, runs[l].what, eg);
        }
        vt_graph_free(g);
        vt_params_free(P);
    }
}

/* 1 when the operands' gradients in xa and xb are bit-identical. */
static int same_grads(const gc_case *c, vt_tensor **xa, vt_tensor **xb) {
    for (int i = 0; i < c->nx; i++)
        if (xa[i]->grad && memcmp(xa[i]->grad, xb[i]->grad, sizeof(float) * (size_t)xa[i]->numel)) return 0;
    return 1;
}

/* The memory plan and the ops' bwd_reads declarations: the case planned keep_all (every value kept until its
 * producer's backward) gives the same gradients as the default plan (g, already differentiated), and the same again
 * when every value a node's backward does not declare reading is NaN while it runs (vt_graph_backward_poisoned). */
static void gc_check_reads(vt_test *T, const gc_case *c, vt_tensor **x) {
    vt_params *P;
    vt_tensor *xk[GC_MAXX], *y, *r;
    vt_rng rng;
    vt_graph *g = gc_build(T, c, 1, &P, xk, &y, &r, &rng);
    if (!g) return;
    vt_err e = {0};
    vt_graph_forward(g);
    vt_params_zero_grad(P);
    vt_graph_backward(g);
    T_CHECK(T, same_grads(c, x, xk), "%s: the default plan's gradients equal the keep-all plan's", c->name);
    float *ref[GC_MAXX] = {0};
    int ok = 1;
    for (int i = 0; i < c->nx; i++)
        if (xk[i]->grad && (ref[i] = vt_alloc(sizeof(float) * (size_t)xk[i]->numel, &e)))
            memcpy(ref[i], xk[i]->grad, sizeof(float) * (size_t)xk[i]->numel);
    vt_graph_forward(g); /* a backward may overwrite values that only it read: one forward per backward */
    vt_params_zero_grad(P);
    ok = vt_graph_backward_poisoned(g, &e) == 0;
    T_CHECK(T, ok, "%s: poisoned backward runs: %s", c->name, e.msg);
    for (int i = 0; ok && i < c->nx; i++)
        if (xk[i]->grad)
            T_CHECK(T, ref[i] && !memcmp(ref[i], xk[i]->grad, sizeof(float) * (size_t)xk[i]->numel),
                    "%s: operand x%d's gradient changes when the values its ops' backward do not declare reading "
                    "are NaN (a bwd_reads declaration is too small)", c->name, i);
    for (int i = 0; i < c->nx; i++) vt_free(ref[i]);
    vt_graph_free(g);
    vt_params_free(P);
}

/* Gradients an op writes first: with every operand seen through an identity activation, the op's backward writes
 * those activations' gradients (vt_node.grad_fresh, NaN until it runs: the poisoned backward), and the operands'
 * gradients equal x's (from the case as built, operands read directly as parameters) to rounding. */
static void gc_check_fresh(vt_test *T, const gc_case *c, vt_tensor **x) {
    vt_params *P;
    vt_tensor *xa[GC_MAXX], *y, *r;
    vt_rng rng;
    vt_graph *g = gc_build_as(T, c, 1, 1, &P, xa, &y, &r, &rng);
    if (!g) return;
    vt_err e = {0};
    vt_graph_forward(g);
    vt_params_zero_grad(P);
    const int ok = vt_graph_backward_poisoned(g, &e) == 0;
    T_CHECK(T, ok, "%s: poisoned backward through identity activations runs: %s", c->name, e.msg);
    for (int i = 0; ok && i < c->nx; i++) {
        if (!x[i]->grad || c->nograd[i]) continue;
        double err = 0.0, mag = 0.0;
        for (int64_t j = 0; j < x[i]->numel; j++) {
            err = t_worse(err, fabs((double)xa[i]->grad[j] - x[i]->grad[j])); /* NaN fails below */
            if (!isfinite(xa[i]->grad[j])) err = INFINITY;
            mag = fmax(mag, fabs((double)x[i]->grad[j]));
        }
        T_CHECK(T, err <= 1e-5 * fmax(mag, 1e-3), "%s: operand x%d's gradient through an identity activation differs "
                "by %.3g (max %.3g): a backward leaves part of a gradient it writes first unwritten (grad_fresh)",
                c->name, i, err, mag);
    }
    vt_graph_free(g);
    vt_params_free(P);
}

void gc_run(vt_test *T, const gc_case *c) {
    vt_params *P;
    vt_tensor *x[GC_MAXX], *y, *r;
    vt_rng rng;
    vt_graph *g = gc_build(T, c, 0, &P, x, &y, &r, &rng);
    if (!g) return;
    vt_graph_forward(g);
    vt_params_zero_grad(P);
    vt_graph_backward(g);
    gc_check_kernels(T, c, y, x);
    if (!c->eval) {
        gc_check_reads(T, c, x);
        if (!c->node_rng) gc_check_fresh(T, c, x);
    }
    const double eps = c->eps > 0 ? c->eps : 1e-2, tol = c->tol > 0 ? c->tol : 1e-2;
    for (int i = 0; i < c->nx; i++) {
        if (c->nograd[i]) continue;
        int64_t n = x[i]->numel, step = n > 64 ? n / 64 : 1;
        double maxnum = 0.0, maxerr = 0.0;
        int64_t worst = 0;
        double wa = 0, wn = 0;
        for (int64_t j = 0; j < n; j += step) {
            int64_t k = (j + (int64_t)vt_rng_below(&rng, (uint32_t)step)) % n;
            float keep = x[i]->data[k];
            x[i]->data[k] = (float)(keep + eps);
            double lp = host_loss(g, y, r->data);
            x[i]->data[k] = (float)(keep - eps);
            double lm = host_loss(g, y, r->data);
            x[i]->data[k] = keep;
            double num = (lp - lm) / (2 * eps), ana = x[i]->grad[k];
            if (fabs(num) > maxnum) maxnum = fabs(num);
            const double d = fabs(ana - num);
            if (!(d <= maxerr)) { /* a NaN gradient too (fmax and > drop it): the worst, INFINITY */
                maxerr = d == d ? d : INFINITY;
                worst = k;
                wa = ana;
                wn = num;
            }
        }
        double rel = maxerr / (maxnum > 1e-2 ? maxnum : 1e-2);
        T_CHECK(T, rel <= tol && isfinite(rel), "%s: operand x%d rel err %.3g (elem %lld analytic %.6g numeric %.6g)",
                c->name, i, rel, (long long)worst, wa, wn);
    }
    vt_graph_free(g);
    vt_params_free(P);
}

double gc_param_error(vt_graph *g, vt_tensor *t, const vt_tensor *y, const float *r, int samples, float eps,
                      int kinks, double *abs_sum) {
    const int64_t n = t->numel, step = n > samples ? n / samples : 1;
    double maxnum = 0, maxerr = 0, any = 0;
    for (int64_t j = 0; j < n; j++) any += fabs(t->grad[j]);
    *abs_sum = any;
    const double l0 = kinks ? host_loss(g, y, r) : 0.0;
    for (int64_t j = 0; j < n; j += step) {
        const float keep = t->data[j];
        t->data[j] = keep + eps;
        const double lp = host_loss(g, y, r);
        t->data[j] = keep - eps;
        const double lm = host_loss(g, y, r);
        t->data[j] = keep;
        const double num = (lp - lm) / (2.0 * eps), a = t->grad[j];
        double err = fabs(num - a);
        if (kinks) /* a kink between keep - eps and keep + eps: the side without it gives the slope */
            err = fmin(err, fmin(fabs((l0 - lm) / eps - a), fabs((lp - l0) / eps - a)));
        if (!isfinite(num) || !isfinite(a) || !isfinite(err)) return INFINITY;
        maxnum = fmax(maxnum, fabs(num));
        maxerr = fmax(maxerr, err);
    }
    return maxerr / fmax(maxnum, 1e-2);
}

void gc_run_vs_plain(vt_test *T, const gc_case *c, vt_tensor *(*plain)(vt_graph *, vt_tensor **, const gc_case *),
                     const char *name, double tol) {
    gc_run(T, c);
    gc_case p = *c;
    p.name = name;
    p.build = plain;
    gc_compare(T, &p, c, tol);
}

void gc_compare(vt_test *T, const gc_case *a, const gc_case *b, double tol) {
    for (int train = 0; train < 2; train++) {
        vt_params *P[2] = {NULL, NULL};
        vt_tensor *x[2][GC_MAXX], *y[2], *r[2];
        vt_graph *g[2] = {NULL, NULL};
        vt_rng rng[2];
        const gc_case *c[2] = {a, b};
        for (int k = 0; k < 2; k++) {
            g[k] = gc_build_lib(T, c[k], 0, train, train, NULL, 0, &P[k], x[k], &y[k], &r[k], &rng[k]);
            if (!g[k]) break;
            vt_graph_forward(g[k]);
            if (!train) continue;
            vt_params_zero_grad(P[k]);
            vt_graph_backward(g[k]);
        }
        if (g[0] && g[1]) {
            const double ey = gc_rel_diff(y[1]->data, y[0]->data, y[0]->numel, 1.0);
            T_CHECK(T, ey <= tol, "%s (train=%d): output differs from %s's by %.3g of its scale", b->name, train,
                    a->name, ey);
            for (int i = 0; train && i < a->nx; i++) {
                if (a->nograd[i] || !x[0][i]->grad) continue;
                const double eg = gc_rel_diff(x[1][i]->grad, x[0][i]->grad, x[0][i]->numel, 1.0);
                T_CHECK(T, eg <= tol, "%s: operand x%d's gradient differs from %s's by %.3g of its scale", b->name, i,
                        a->name, eg);
            }
        }
        for (int k = 0; k < 2; k++) {
            if (!g[k]) continue;
            vt_graph_free(g[k]);
            vt_params_free(P[k]);
        }
        if (!g[0] || !g[1]) return;
    }
}

void gc_shake_norms(vt_params *P, uint64_t seed, float spread) {
    vt_rng r;
    vt_rng_seed(&r, seed);
    for (int i = 0; i < P->n; i++) {
        vt_tensor *t = P->t[i];
        if (t->is_i64 || t->ndim != 1) continue;
        const size_t len = strlen(t->name);
        const int var = len > 11 && !strcmp(t->name + len - 11, "running_var");
        for (int64_t j = 0; j < t->numel; j++)
            t->data[j] = var ? 0.5f + vt_rng_uniform(&r) : t->data[j] + spread * vt_rng_normal(&r);
    }
}

/* One graph of gc_compare_eval_fused: the output (malloc'd) or NULL; *has_op: some node runs op. */
static float *eval_fused_run(vt_test *T, const char *tag, int ref, int ndim, const int *xs, gc_eval_build build,
                             const void *ctx, const char *op, int *has_op, int64_t *numel) {
    vt_err e = {0};
    vt_params *P = vt_params_new(&e);
    vt_graph *g = vt_graph_new(P, 0, &e);
    g->ref_kernels = ref;
    vt_tensor *x = vt_input(g, "x", ndim, xs), *y = build(g, x, ctx);
    float *out = NULL;
    if (y) vt_graph_output(g, y);
    if (!y || vt_graph_finalize(g, &e)) {
        T_CHECK(T, 0, "%s: build failed: %s", tag, e.msg);
    } else {
        vt_params_init(P, 7);
        gc_shake_norms(P, 5, 0.4f);
        vt_rng r;
        vt_rng_seed(&r, 11);
        for (int64_t j = 0; j < x->numel; j++) x->data[j] = vt_rng_normal(&r);
        vt_graph_forward(g);
        *has_op = 0;
        for (int i = 0; i < g->nn; i++) *has_op |= !strcmp(g->nodes[i]->op->name, op);
        *numel = y->numel;
        out = malloc(sizeof(float) * (size_t)y->numel);
        if (out) memcpy(out, y->data, sizeof(float) * (size_t)y->numel);
    }
    vt_graph_free(g);
    vt_params_free(P);
    return out;
}

void gc_compare_eval_fused(vt_test *T, const char *tag, int ndim, const int *xs, gc_eval_build build, const void *ctx,
                           const char *op, double tol) {
    int fk = 0, fr = 1;
    int64_t nk = 0, nr = 0;
    float *k = eval_fused_run(T, tag, 0, ndim, xs, build, ctx, op, &fk, &nk);
    float *r = eval_fused_run(T, tag, 1, ndim, xs, build, ctx, op, &fr, &nr);
    T_CHECK(T, fk && !fr, "%s: %s taken %d (expected 1), by the reference graph %d (expected 0)", tag, op, fk, fr);
    if (k && r && nk == nr) {
        double err = 0, mx = 0;
        for (int64_t i = 0; i < nk; i++) err = t_worse(err, fabs(k[i] - r[i])), mx = fmax(mx, fabs(r[i]));
        T_CHECK(T, err <= tol * fmax(1.0, mx) && mx > 0, "%s: fused vs op chain max |diff| %g (scale %g)", tag, err,
                mx);
    }
    free(k);
    free(r);
}
