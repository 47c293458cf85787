/* Synchronised BatchNorm (vt_graph.allsum) without mpirun: R replicas of a shrunk model, each a training graph of
 * batch B on its own copy of the same parameters, run at once on R threads whose allsum adds their buffers through
 * shared memory. Their logits must be the rows of one graph of batch R·B, their running statistics its running
 * statistics, and the sum of their gradients its gradient, the loss being Σ logits·r over the rows (torch's
 * SyncBatchNorm gives the same: BatchNorm over the concatenated batch). Without allsum the same replicas must miss
 * them (each normalises its own batch), so the comparison can fail. The models cover each BatchNorm op: GroupMixFormer
 * (BatchNorm + Hardswish, the aggregators' parameter sets), Next-ViT + hMHSA + cFFN (channels-last BatchNorm + ReLU,
 * cFFN's batchnorm_sum) and Refined-ViT (its DLA's BatchNorm chain instead of the fused ops, which refuse allsum). */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "shrink.h"
#include "test.h"
#include "vitc/graph.h"
#include "vitc/model.h"
#include "vitc/ops.h"
#include "vitc/rng.h"

enum { NREP = 2, BATCH = 2 };

/* The replicas' meeting point: each copies its buffer into its slot, all wait, each adds the slots in replica order
 * (the same sum on every replica), all wait again before a slot is reused. */
typedef struct {
    pthread_barrier_t bar;
    double *slot[NREP];
    int cap, calls;
} meet;

typedef struct {
    meet *m;
    int r;
} rep_ctx;

static void allsum(void *ctx, double *v, int n) {
    rep_ctx *c = ctx;
    meet *m = c->m;
    if (n > m->cap) abort(); /* sized for the largest BatchNorm below */
    memcpy(m->slot[c->r], v, sizeof(double) * (size_t)n);
    pthread_barrier_wait(&m->bar);
    for (int i = 0; i < n; i++) {
        double s = 0.0;
        for (int r = 0; r < NREP; r++) s += m->slot[r][i];
        v[i] = s;
    }
    if (c->r == 0) m->calls++;
    pthread_barrier_wait(&m->bar);
}

/* One training graph of batch B over its own parameters (seed 5), loss Σ logits·rw; sync: allsum through ctx. */
typedef struct {
    vt_params *P;
    vt_graph *g;
    vt_tensor *x, *y, *rw;
    rep_ctx ctx;
} replica;

static int rep_build(replica *q, const vt_model_cfg *c, int B, meet *m, int r, vt_err *e) {
    memset(q, 0, sizeof *q);
    if (!(q->P = vt_params_new(e)) || vt_model_init_params(c, q->P, 5, e) || !(q->g = vt_graph_new(q->P, 1, e)))
        return -1;
    if (m) {
        q->ctx = (rep_ctx){m, r};
        q->g->allsum = allsum;
        q->g->allsum_ctx = &q->ctx;
        q->g->replicas = NREP;
    }
    q->y = vt_model_build(q->g, c, B, &q->x);
    q->rw = q->y ? vt_input(q->g, "rw", q->y->ndim, q->y->shape) : NULL;
    if (q->rw) vt_graph_set_loss(q->g, vt_sum(q->g, vt_mul(q->g, q->y, q->rw)));
    if (q->y) vt_graph_output(q->g, q->y);
    if (!q->rw || vt_graph_finalize(q->g, e)) return q->g->err.msg[0] ? vt_seterr(e, "%s", q->g->err.msg) : -1;
    return 0;
}

static void rep_free(replica *q) {
    vt_graph_free(q->g);
    vt_params_free(q->P);
}

static void *rep_step(void *arg) {
    replica *q = arg;
    vt_graph_forward(q->g);
    vt_params_zero_grad(q->P);
    vt_graph_backward(q->g);
    return NULL;
}

/* Rows [r·B, (r + 1)·B) of the whole batch's x and rw into replica q. */
static void rep_feed(replica *q, const replica *all, int r) {
    memcpy(q->x->data, all->x->data + (size_t)r * q->x->numel, sizeof(float) * (size_t)q->x->numel);
    memcpy(q->rw->data, all->rw->data + (size_t)r * q->rw->numel, sizeof(float) * (size_t)q->rw->numel);
}

/* Largest |a − b| over the largest |b| (at least 1e-30) of two arrays. */
static double rel_err(const float *a, const float *b, int64_t n, double *scale) {
    double d = 0.0, s = 1e-30;
    for (int64_t i = 0; i < n; i++) {
        d = t_worse(d, fabs((double)a[i] - b[i]));
        s = fmax(s, fabs((double)b[i]));
    }
    if (scale) *scale = s;
    return d / s;
}

/* Worst relative errors of the replicas against the whole batch: logits, running statistics, gradient sums. */
typedef struct {
    double fwd, stats, grad;
    int nstats, ngrad;
} errs;

static errs compare(replica *rep, const replica *all) {
    errs x = {0};
    for (int r = 0; r < NREP; r++)
        x.fwd = fmax(x.fwd, rel_err(rep[r].y->data, all->y->data + (size_t)r * rep[r].y->numel, rep[r].y->numel, NULL));
    double gs = 0.0; /* the largest gradient: the floor of each tensor's scale (some are 0 but for round-off: a conv's
                      * bias before a batch-statistics BatchNorm) */
    double ss = 0.0; /* the largest running statistic: the floor of each one's scale (a running mean whose input has
                      * mean 0 by construction, after a normalisation, holds round-off: 1e-9 on AVX2 kernels) */
    for (int i = 0; i < all->P->n; i++) {
        const vt_tensor *t = all->P->t[i];
        for (int64_t k = 0; t->kind == VT_PARAM && t->grad && k < t->numel; k++) gs = fmax(gs, fabs(t->grad[k]));
        for (int64_t k = 0; strstr(t->name, "running_") && k < t->numel; k++) ss = fmax(ss, fabs(t->data[k]));
    }
    for (int i = 0; i < all->P->n; i++) {
        const vt_tensor *t = all->P->t[i];
        if (strstr(t->name, "running_")) { /* both replicas hold the whole batch's */
            x.nstats++;
            for (int r = 0; r < NREP; r++) {
                double scale;
                const double err = rel_err(rep[r].P->t[i]->data, t->data, t->numel, &scale);
                x.stats = fmax(x.stats, err * scale / fmax(scale, 1e-3 * ss));
            }
        }
        if (t->kind != VT_PARAM || !t->grad) continue;
        float *sum = calloc((size_t)t->numel, sizeof(float));
        if (!sum) abort();
        for (int r = 0; r < NREP; r++)
            for (int64_t k = 0; k < t->numel; k++) sum[k] += rep[r].P->t[i]->grad[k];
        double scale;
        const double err = rel_err(sum, t->grad, t->numel, &scale);
        x.grad = fmax(x.grad, err * scale / fmax(scale, 1e-3 * gs));
        x.ngrad++;
        free(sum);
    }
    return x;
}

static void check_model(vt_test *T, const char *name) {
    vt_err e = {0};
    vt_model_cfg c0;
    if (vt_test_shrink(vt_model_find(name), &c0, &e)) {
        T_CHECK(T, 0, "%s: %s", name, e.msg);
        return;
    }
    const vt_model_cfg c = vt_model_training_form(&c0);
    meet m = {.cap = 1 << 16};
    pthread_barrier_init(&m.bar, NULL, NREP);
    for (int r = 0; r < NREP; r++)
        if (!(m.slot[r] = malloc(sizeof(double) * (size_t)m.cap))) abort();
    replica all = {0}, sync[NREP] = {0}, own[NREP] = {0};
    int ok = rep_build(&all, &c, NREP * BATCH, NULL, 0, &e) == 0;
    for (int r = 0; ok && r < NREP; r++)
        ok = rep_build(&sync[r], &c, BATCH, &m, r, &e) == 0 && rep_build(&own[r], &c, BATCH, NULL, 0, &e) == 0;
    T_CHECK(T, ok, "%s: build: %s", name, e.msg);
    if (ok) {
        vt_rng rng;
        vt_rng_seed(&rng, 17);
        for (int64_t i = 0; i < all.x->numel; i++) all.x->data[i] = vt_rng_normal(&rng);
        for (int64_t i = 0; i < all.rw->numel; i++) all.rw->data[i] = vt_rng_normal(&rng);
        rep_step(&all);
        pthread_t tid[NREP];
        int started = 0;
        for (int r = 0; r < NREP; r++) rep_feed(&sync[r], &all, r);
        for (; started < NREP; started++)
            if (pthread_create(&tid[started], NULL, rep_step, &sync[started])) break;
        T_CHECK(T, started == NREP, "%s: pthread_create", name);
        if (started < NREP) abort(); /* a replica would wait at the barrier forever */
        for (int r = 0; r < NREP; r++) pthread_join(tid[r], NULL);
        for (int r = 0; r < NREP; r++) {
            rep_feed(&own[r], &all, r);
            rep_step(&own[r]);
        }
        const errs s = compare(sync, &all), u = compare(own, &all);
        T_CHECK(T, s.nstats > 0 && s.ngrad > 0 && m.calls > 0, "%s: %d running statistics, %d gradients, %d allsums",
                name, s.nstats, s.ngrad, m.calls);
        T_CHECK(T, s.fwd <= 1e-4 && s.stats <= 1e-4 && s.grad <= 1e-3,
                "%s synchronised against batch %d: logits %.2e, running statistics %.2e, gradients %.2e", name,
                NREP * BATCH, s.fwd, s.stats, s.grad);
        T_CHECK(T, u.fwd > 1e-2 && u.stats > 1e-2 && u.grad > 1e-2,
                "%s unsynchronised replicas should miss batch %d: logits %.2e, running statistics %.2e, gradients "
                "%.2e", name, NREP * BATCH, u.fwd, u.stats, u.grad);
    }
    rep_free(&all);
    for (int r = 0; r < NREP; r++) {
        rep_free(&sync[r]);
        rep_free(&own[r]);
    }
    for (int r = 0; r < NREP; r++) free(m.slot[r]);
    pthread_barrier_destroy(&m.bar);
}

void test_syncbn(vt_test *T) {
    check_model(T, "groupmixformer_m");
    check_model(T, "nextvit_small_hmhsa_cffn");
    check_model(T, "refiner_vit_s");
}
