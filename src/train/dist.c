/* Data parallelism over OpenMPI: launch context, DistributedSampler shards, bucketed gradient allreduce (started from
 * the graph's backward hook as buckets become final), reductions and broadcasts from rank 0. */
#include "vitc/dist.h"

#include <limits.h>
#include <mpi.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "vitc/augment.h"
#include "vitc/rng.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Turns an MPI return code into a vitc error naming the call (with the default handler MPI aborts first). */
static int mpi_check(int rc, const char *call, vt_err *e) {
    if (rc == MPI_SUCCESS) return 0;
    char msg[MPI_MAX_ERROR_STRING] = "";
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    return vt_seterr(e, "%s failed: %s", call, msg);
}

int vt_dist_launched(void) {
    const char *a = getenv("OMPI_COMM_WORLD_SIZE"), *b = getenv("PMIX_RANK");
    return (a && *a) || (b && *b);
}

/* The non-negative integer in environment variable name, else fallback. */
static int env_int(const char *name, int fallback) {
    const char *v = getenv(name);
    char *end = NULL;
    const long x = v && *v ? strtol(v, &end, 10) : -1;
    return x >= 0 && x <= INT_MAX && end && !*end ? (int)x : fallback;
}

int vt_dist_env(int *rank, int *local_rank, int *local_size) {
    const int launched = vt_dist_launched();
    const int r = launched ? env_int("OMPI_COMM_WORLD_RANK", env_int("PMIX_RANK", 0)) : 0;
    if (rank) *rank = r;
    if (local_rank) *local_rank = launched ? env_int("OMPI_COMM_WORLD_LOCAL_RANK", r) : 0;
    if (local_size) *local_size = launched ? env_int("OMPI_COMM_WORLD_LOCAL_SIZE", env_int("PMIX_LOCAL_SIZE", 1)) : 1;
    const int size = launched ? env_int("OMPI_COMM_WORLD_SIZE", 1) : 1;
    return size > 0 ? size : 1;
}

/* d->cpu_sharers and d->cpu_share_lead from the affinity masks of the node's ranks (gathered over node): ranks whose
 * masks overlap this one's compete for its cores (unbound ranks, or ranks bound to one socket, share theirs). A mask
 * that cannot be read overlaps none; where a rank has no memory for the masks, every rank leaves the counts at 1 (the
 * ranks agree first: one rank failing alone would leave the others waiting in the gather). */
static int cpu_sharing(vt_dist *d, MPI_Comm node, vt_err *e) {
    size_t bytes = 0;
    unsigned char *mine = vt_cpus_mask(&bytes);
    int b = (int)bytes, most = 0, rc = mpi_check(MPI_Allreduce(&b, &most, 1, MPI_INT, MPI_MAX, node), "MPI_Allreduce", e);
    unsigned char *all = rc || most <= 0 ? NULL : calloc((size_t)d->local_size + 1, (size_t)most);
    int have = all != NULL, every = 0;
    if (rc == 0) rc = mpi_check(MPI_Allreduce(&have, &every, 1, MPI_INT, MPI_MIN, node), "MPI_Allreduce", e);
    if (rc == 0 && every) {
        unsigned char *me = all + (size_t)d->local_size * (size_t)most; /* mine, padded to the longest mask */
        if (mine) memcpy(me, mine, bytes);
        rc = mpi_check(MPI_Allgather(me, most, MPI_BYTE, all, most, MPI_BYTE, node), "MPI_Allgather", e);
        for (int r = 0; rc == 0 && r < d->local_size; r++) {
            int overlap = 0;
            for (int i = 0; i < most && !overlap; i++) overlap = (all[(size_t)r * (size_t)most + i] & me[i]) != 0;
            if (!overlap || r == d->local_rank) continue;
            d->cpu_sharers++;
            if (r < d->local_rank) d->cpu_share_lead = 0;
        }
    }
    free(all);
    free(mine);
    return rc;
}

int vt_dist_init(vt_dist *d, vt_err *e) {
    memset(d, 0, sizeof *d);
    d->size = d->local_size = d->cpu_sharers = d->cpu_share_lead = 1;
    d->overlap = 1;
    d->bucket_bytes = (size_t)4 << 20;
    if (!vt_dist_launched()) return 0;
    int inited = 0, provided = 0;
    MPI_Initialized(&inited);
    if (!inited && mpi_check(MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread", e))
        return -1;
    d->mpi = 1;
    d->mpi_owned = !inited;
    /* OpenMP threads run while the main thread alone calls MPI: FUNNELED (a library initialised by the caller may
     * provide less) */
    if (mpi_check(MPI_Query_thread(&provided), "MPI_Query_thread", e)) return -1;
    if (provided < MPI_THREAD_FUNNELED)
        return vt_seterr(e, "the MPI library provides thread level %d, below MPI_THREAD_FUNNELED (%d), which vitc "
                         "needs: its OpenMP threads run while the main thread calls MPI", provided,
                         MPI_THREAD_FUNNELED);
    MPI_Comm node;
    if (mpi_check(MPI_Comm_rank(MPI_COMM_WORLD, &d->rank), "MPI_Comm_rank", e) ||
        mpi_check(MPI_Comm_size(MPI_COMM_WORLD, &d->size), "MPI_Comm_size", e) ||
        mpi_check(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, d->rank, MPI_INFO_NULL, &node),
                  "MPI_Comm_split_type", e))
        return -1;
    MPI_Comm_rank(node, &d->local_rank);
    MPI_Comm_size(node, &d->local_size);
    const int rc = cpu_sharing(d, node, e);
    MPI_Comm_free(&node);
    return rc;
}

void vt_dist_finalize(vt_dist *d) {
    if (!d || !d->mpi) return;
    int done = 0;
    MPI_Finalized(&done);
    if (!done && d->mpi_owned) MPI_Finalize();
    d->mpi = d->mpi_owned = 0;
}

void vt_dist_abort(const vt_dist *d, int code) {
    if (d && d->mpi) MPI_Abort(MPI_COMM_WORLD, code);
}

int vt_dist_shard(const int *perm, int n, int size, int rank, int *out) {
    if (!perm || !out || n < 1 || size < 1 || rank < 0 || rank >= size) return -1;
    const int per = (int)(((int64_t)n + size - 1) / size);
    for (int k = 0; k < per; k++) out[k] = perm[(int)(((int64_t)rank + (int64_t)size * k) % n)];
    return per;
}

int vt_dist_epoch_indices(const vt_dist *d, int n, uint64_t seed, int64_t epoch, int *out, vt_err *e) {
    if (n < 1) return vt_seterr(e, "empty dataset");
    int *perm = malloc(sizeof(int) * (size_t)n);
    if (!perm) return vt_seterr_code(e, VT_E_NOMEM, "out of memory");
    vt_rng r;
    vt_rng_seed(&r, (seed ^ 0xda7aULL) + 0x9e3779b97f4a7c15ULL * (uint64_t)(epoch + 1));
    vt_iota(perm, n);
    vt_shuffle(perm, n, &r);
    const int k = vt_dist_shard(perm, n, d->size, d->rank, out);
    free(perm);
    return k < 0 ? vt_seterr(e, "bad shard (rank %d of %d)", d->rank, d->size) : k;
}

int vt_dist_sum(const vt_dist *d, double *v, int n, vt_err *e) {
    if (!d->mpi || d->size == 1) return 0;
    return mpi_check(MPI_Allreduce(MPI_IN_PLACE, v, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD), "MPI_Allreduce", e);
}

void vt_dist_allsum(void *ctx, double *v, int n) {
    const vt_dist *d = ctx;
    vt_err e = {0};
    if (vt_dist_sum(d, v, n, &e) == 0) return;
    /* inside a graph step, which cannot fail: the ranks stop together (MPI's default error handler would have) */
    fprintf(stderr, "vitc: rank %d: synchronised BatchNorm: %s\n", d->rank, e.msg);
    vt_dist_abort(d, 1);
}

int vt_dist_broadcast(const vt_dist *d, vt_params *P, vt_adamw *opt, int64_t *v, int nv, vt_err *e) {
    if (!d->mpi || d->size == 1) return 0;
    vt_params_changed(P);
    for (int i = 0; i < P->n; i++) {
        vt_tensor *t = P->t[i];
        if (t->data && mpi_check(MPI_Bcast(t->data, (int)t->numel, MPI_FLOAT, 0, MPI_COMM_WORLD), "MPI_Bcast", e))
            return -1;
    }
    for (int i = 0; opt && i < vt_adamw_nstate(opt); i++) {
        int64_t numel;
        float *s = vt_adamw_state(opt, i, NULL, 0, &numel, NULL);
        if (mpi_check(MPI_Bcast(s, (int)numel, MPI_FLOAT, 0, MPI_COMM_WORLD), "MPI_Bcast", e)) return -1;
    }
    if (opt && mpi_check(MPI_Bcast(&opt->step, 1, MPI_INT64_T, 0, MPI_COMM_WORLD), "MPI_Bcast", e)) return -1;
    return vt_dist_bcast_i64(d, v, nv, e);
}

int vt_dist_bcast_i64(const vt_dist *d, int64_t *v, int n, vt_err *e) {
    if (!d->mpi || d->size == 1 || n <= 0) return 0;
    return mpi_check(MPI_Bcast(v, n, MPI_INT64_T, 0, MPI_COMM_WORLD), "MPI_Bcast", e);
}

int vt_dist_bcast_bytes(const vt_dist *d, char **buf, size_t *len, vt_err *e) {
    if (!d->mpi || d->size == 1) return 0;
    int64_t n = d->rank == 0 && *buf ? (int64_t)*len : 0;
    if (vt_dist_bcast_i64(d, &n, 1, e)) return -1;
    if (n > INT_MAX) return vt_seterr(e, "broadcast of %lld bytes: too long", (long long)n);
    if (d->rank != 0) {
        *buf = NULL;
        *len = (size_t)n;
    }
    if (n == 0) return 0;
    if (d->rank != 0) *buf = malloc((size_t)n);
    /* every rank has its buffer before any enters the broadcast: a rank short of memory must not leave the others
     * waiting in it (nor meet them in the next collective) */
    int ok = *buf != NULL;
    if (mpi_check(MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD), "MPI_Allreduce", e)) return -1;
    if (!ok) {
        if (d->rank != 0) {
            free(*buf);
            *buf = NULL;
        }
        return vt_seterr_code(e, VT_E_NOMEM, "out of memory for a broadcast of %lld bytes (on some rank)",
                              (long long)n);
    }
    return mpi_check(MPI_Bcast(*buf, (int)n, MPI_CHAR, 0, MPI_COMM_WORLD), "MPI_Bcast", e);
}

int vt_dist_agree(vt_dist *d, int rc, vt_err *e) {
    if (!d->mpi || d->size == 1) {
        if (rc) d->err_shared = d->err_reporter = 1;
        return rc ? -1 : 0;
    }
    int lowest = rc ? d->rank : d->size;
    if (mpi_check(MPI_Allreduce(MPI_IN_PLACE, &lowest, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD), "MPI_Allreduce", e))
        return -1;
    if (lowest == d->size) return 0;
    if (d->err_shared) return -1; /* an earlier agreement stopped the ranks: its reporter stays the one */
    d->err_shared = 1;
    d->err_reporter = lowest == d->rank;
    if (!rc) vt_seterr(e, "stopped: rank %d failed", lowest);
    return -1;
}

/* ---- gradient buckets ---- */

struct vt_dist_grads {
    vt_dist *d;
    vt_graph *g;
    int nb;              /* buckets */
    vt_tensor **p;       /* parameters in bucket order: the first finished by backward first */
    int *first;          /* bucket k holds p[first[k] .. first[k+1]) */
    int64_t *off;        /* ... at buf[off[k] .. off[k+1]) */
    int *ready;          /* bucket k's gradients are final once backward has run node ready[k] */
    float *buf;          /* the packed gradients of every bucket */
    MPI_Request *req;    /* one per bucket */
    int next, done;      /* buckets started, buckets known complete (overlap) */
};

/* Packs bucket k's gradients into its slice of buf. */
static void pack(vt_dist_grads *b, int k) {
    float *dst = b->buf + b->off[k];
    for (int i = b->first[k]; i < b->first[k + 1]; i++) {
        memcpy(dst, b->p[i]->grad, sizeof(float) * (size_t)b->p[i]->numel);
        dst += b->p[i]->numel;
    }
}

/* Stores bucket k's summed gradients divided by the rank count back into the parameters. */
static void unpack(vt_dist_grads *b, int k) {
    const float *src = b->buf + b->off[k];
    const float inv = 1.0f / (float)b->d->size;
    for (int i = b->first[k]; i < b->first[k + 1]; i++) {
        float *g = b->p[i]->grad;
        const int64_t n = b->p[i]->numel;
        for (int64_t j = 0; j < n; j++) g[j] = src[j] * inv;
        src += n;
    }
}

/* The backward hook: after node `node`, starts every bucket whose gradients are now final, then lets MPI progress the
 * started ones (OpenMPI moves nonblocking collectives only inside MPI calls). */
static void on_backward(void *ctx, int node) {
    vt_dist_grads *b = ctx;
    const double t = now_s();
    for (; b->next < b->nb && b->ready[b->next] >= node; b->next++) {
        pack(b, b->next);
        const int64_t n = b->off[b->next + 1] - b->off[b->next];
        MPI_Iallreduce(MPI_IN_PLACE, b->buf + b->off[b->next], (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD,
                       &b->req[b->next]);
    }
    for (int flag = 1; flag && b->done < b->next;) {
        MPI_Test(&b->req[b->done], &flag, MPI_STATUS_IGNORE);
        if (flag) b->done++;
    }
    b->d->comm_s += now_s() - t;
}

/* Order of parameters: later first use in forward (finished earlier by backward) first, then later in the store. */
typedef struct {
    vt_tensor *t;
    int first_use, index;
} param_use;

static int cmp_use(const void *x, const void *y) {
    const param_use *a = x, *b = y;
    if (a->first_use != b->first_use) return a->first_use < b->first_use ? 1 : -1;
    return (a->index < b->index) - (a->index > b->index);
}

vt_dist_grads *vt_dist_grads_new(vt_dist *d, vt_graph *g, vt_err *e) {
    vt_dist_grads *b = vt_alloc(sizeof *b, e);
    if (!b) return NULL;
    b->d = d;
    b->g = g;
    if (!d->mpi || d->size == 1) return b;
    const vt_params *P = g->P;
    param_use *u = vt_alloc(sizeof *u * (size_t)(P->n + 1), e);
    if (!u) goto fail;
    int np = 0;
    for (int i = 0; i < P->n; i++) {
        vt_tensor *t = P->t[i];
        if (t->kind == VT_PARAM && t->requires_grad && t->grad && t->data) u[np++] = (param_use){t, g->nn, i};
    }
    for (int i = 0; i < g->nn; i++) { /* a parameter's gradient is written only by the backward of its readers */
        const vt_node *nd = g->nodes[i];
        for (int k = 0; k < nd->nin; k++) {
            const vt_tensor *r = vt_root(nd->in[k]);
            if (r->kind != VT_PARAM) continue;
            for (int j = 0; j < np; j++)
                if (u[j].t == r && i < u[j].first_use) u[j].first_use = i;
        }
    }
    qsort(u, (size_t)np, sizeof *u, cmp_use);
    const size_t cap = d->bucket_bytes / sizeof(float) > 0 ? d->bucket_bytes / sizeof(float) : 1;
    if (!(b->p = vt_alloc(sizeof *b->p * (size_t)(np + 1), e)) ||
        !(b->first = vt_alloc(sizeof *b->first * (size_t)(np + 2), e)) ||
        !(b->off = vt_alloc(sizeof *b->off * (size_t)(np + 2), e)) ||
        !(b->ready = vt_alloc(sizeof *b->ready * (size_t)(np + 1), e)) ||
        !(b->req = vt_alloc(sizeof *b->req * (size_t)(np + 1), e)))
        goto fail;
    int64_t total = 0, in_bucket = 0;
    for (int i = 0; i < np; i++) {
        b->p[i] = u[i].t;
        if (in_bucket == 0) {
            b->first[b->nb] = i;
            b->off[b->nb] = total;
        }
        in_bucket += u[i].t->numel;
        total += u[i].t->numel;
        b->ready[b->nb] = u[i].first_use; /* the last (smallest) first use in the bucket */
        if ((size_t)in_bucket >= cap || in_bucket + (i + 1 < np ? u[i + 1].t->numel : 0) > INT_MAX || i + 1 == np) {
            b->nb++;
            in_bucket = 0;
        }
    }
    b->first[b->nb] = np;
    b->off[b->nb] = total;
    vt_free(u);
    u = NULL;
    if (!(b->buf = vt_alloc(sizeof(float) * (size_t)(total > 0 ? total : 1), e))) goto fail;
    if (d->overlap) {
        g->bwd_hook = on_backward;
        g->bwd_hook_ctx = b;
    }
    return b;
fail:
    vt_free(u);
    vt_dist_grads_free(b);
    return NULL;
}

int vt_dist_grads_average(vt_dist_grads *b, vt_err *e) {
    vt_dist *d = b->d;
    if (!d->mpi || d->size == 1) return 0;
    const double t = now_s();
    int rc = 0;
    if (d->overlap) {
        for (; b->next < b->nb; b->next++) { /* normally all started by the hook */
            pack(b, b->next);
            MPI_Iallreduce(MPI_IN_PLACE, b->buf + b->off[b->next], (int)(b->off[b->next + 1] - b->off[b->next]),
                           MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &b->req[b->next]);
        }
        rc = mpi_check(MPI_Waitall(b->nb - b->done, b->req + b->done, MPI_STATUSES_IGNORE), "MPI_Waitall", e);
        for (int k = 0; rc == 0 && k < b->nb; k++) unpack(b, k);
        b->next = b->done = 0;
    } else {
        for (int k = 0; rc == 0 && k < b->nb; k++) {
            pack(b, k);
            rc = mpi_check(MPI_Allreduce(MPI_IN_PLACE, b->buf + b->off[k], (int)(b->off[k + 1] - b->off[k]),
                                         MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD), "MPI_Allreduce", e);
            if (rc == 0) unpack(b, k);
        }
    }
    d->comm_s += now_s() - t;
    d->comm_steps++;
    return rc;
}

void vt_dist_grads_hold(vt_dist_grads *b, int hold) {
    if (!b || !b->d->mpi || b->d->size == 1 || !b->d->overlap) return;
    b->g->bwd_hook = hold ? NULL : on_backward;
    b->g->bwd_hook_ctx = hold ? NULL : b;
}

void vt_dist_grads_free(vt_dist_grads *b) {
    if (!b) return;
    if (b->g && b->g->bwd_hook_ctx == b) {
        b->g->bwd_hook = NULL;
        b->g->bwd_hook_ctx = NULL;
    }
    vt_free(b->p);
    vt_free(b->first);
    vt_free(b->off);
    vt_free(b->ready);
    vt_free(b->req);
    vt_free(b->buf);
    vt_free(b);
}
