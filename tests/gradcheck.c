#include "gradcheck.h"

#include <math.h>
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

void gc_run(vt_test *T, const gc_case *c) {
    vt_err e = {{0}};
    vt_params *P = vt_params_new(&e);
    vt_graph *g = vt_graph_new(P, !c->eval, &e);
    vt_rng rng;
    vt_rng_seed(&rng, 1234);
    vt_tensor *x[GC_MAXX];
    for (int i = 0; i < c->nx; i++) {
        char nm[16];
        snprintf(nm, sizeof nm, "x%d", i);
        x[i] = vt_param(g, nm, c->ndim[i], c->shape[i], (vt_init){VT_INIT_ZERO, 0});
    }
    vt_tensor *y = c->build(g, x, c);
    int rshape[VT_MAXDIM] = {0};
    if (y) memcpy(rshape, y->shape, sizeof rshape);
    vt_tensor *r = y ? vt_input(g, "r", y->ndim, rshape) : NULL;
    vt_tensor *loss = vt_sum(g, vt_mul(g, y, r));
    vt_graph_set_loss(g, loss);
    vt_graph_output(g, y);
    if (vt_graph_finalize(g, &e)) {
        T_CHECK(T, 0, "%s: build failed: %s", c->name, e.msg);
        vt_graph_free(g);
        vt_params_free(P);
        return;
    }
    for (int i = 0; i < c->nx; i++) {
        if (c->fill)
            c->fill(x[i]->data, x[i]->numel, i, &rng);
        else
            for (int64_t j = 0; j < x[i]->numel; j++) x[i]->data[j] = vt_rng_normal(&rng);
    }
    for (int64_t j = 0; j < r->numel; j++) r->data[j] = vt_rng_normal(&rng);
    vt_graph_forward(g);
    vt_params_zero_grad(P);
    vt_graph_backward(g);
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
            if (fabs(ana - num) > maxerr) {
                maxerr = fabs(ana - num);
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
                      double *abs_sum) {
    const int64_t n = t->numel, step = n > samples ? n / samples : 1;
    double maxnum = 0, maxerr = 0, any = 0;
    for (int64_t j = 0; j < n; j++) any += fabs(t->grad[j]);
    for (int64_t j = 0; j < n; j += step) {
        const float keep = t->data[j];
        t->data[j] = keep + eps;
        const double lp = host_loss(g, y, r);
        t->data[j] = keep - eps;
        const double lm = host_loss(g, y, r);
        t->data[j] = keep;
        const double num = (lp - lm) / (2.0 * eps);
        maxnum = fmax(maxnum, fabs(num));
        maxerr = fmax(maxerr, fabs(num - t->grad[j]));
    }
    *abs_sum = any;
    return maxerr / fmax(maxnum, 1e-2);
}
