/* Graph construction, memory planning (one arena, interval-based reuse) and the executors. */
#include "vitc/graph.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <omp.h>

#if defined(__SSE2__)
#include <xmmintrin.h>
#endif

int vt_threads_usable(int want) {
    const int limit = omp_get_thread_limit();
    if (omp_get_max_active_levels() < 1 || want < 1) return 1;
    return want < limit ? want : limit;
}

vt_graph *vt_graph_new(vt_params *P, int training, vt_err *e) {
    vt_graph *g = vt_alloc(sizeof(*g), e);
    if (!g) return NULL;
    if (vt_gemm_plan_init(&g->gemm, getenv("VITC_GEMM"), e)) {
        vt_free(g);
        return NULL;
    }
    g->P = P;
    g->threads = vt_threads_usable(omp_get_max_threads());
    g->training = training;
    g->seed = 0x5eed;
    vt_scope(g, "");
    return g;
}

void vt_graph_free(vt_graph *g) {
    if (!g) return;
    vt_gemm_plan_free(&g->gemm);
    for (int i = 0; i < g->nn; i++) vt_free(g->nodes[i]);
    for (int i = 0; i < g->nt; i++) {
        if (g->tens[i]->heap) vt_free(g->tens[i]->data);
        vt_free(g->tens[i]);
    }
    for (int i = 0; i < g->nscopes; i++) free(g->scopes[i]);
    for (int i = 0; i < g->nmaps; i++) vt_free(g->maps[i]);
    vt_free(g->maps);
    vt_free(g->nodes);
    vt_free(g->tens);
    vt_free(g->scopes);
    vt_name_index_free(&g->scope_index);
    vt_free(g->arena);
    vt_free(g->node_s);
    vt_free(g->node_gemm_s);
    vt_free(g->gemm.calls_s);
    vt_free(g);
}

/* Grows a pointer array to hold one more element; returns -1 (error set) on failure. */
static int grow(vt_graph *g, void ***arr, int n, int *cap) {
    if (n < *cap) return 0;
    int nc = *cap ? *cap * 2 : 256;
    void **na = vt_alloc(sizeof(void *) * (size_t)nc, &g->err);
    if (!na) return -1;
    if (n) memcpy(na, *arr, sizeof(void *) * (size_t)n);
    vt_free(*arr);
    *arr = na;
    *cap = nc;
    return 0;
}

vt_tensor *vt_fail(vt_graph *g, const char *op, const char *fmt, ...) {
    if (g->err.msg[0]) return NULL;
    char buf[400];
    va_list ap;
    va_start(ap, fmt);
    vt_msg_vformat(buf, sizeof buf, fmt, ap);
    va_end(ap);
    const char *sc = g->scopes[g->cur_scope];
    vt_seterr(&g->err, "%s%s%s: %s", sc[0] ? sc : "", sc[0] ? ": " : "", op, buf);
    return NULL;
}

int vt_bad(vt_graph *g, int n, ...) {
    if (g->err.msg[0]) return 1;
    va_list ap;
    va_start(ap, n);
    int bad = 0;
    for (int i = 0; i < n; i++)
        if (!va_arg(ap, vt_tensor *)) bad = 1;
    va_end(ap);
    if (bad) vt_seterr(&g->err, "internal: NULL tensor passed to a builder");
    return bad;
}

static vt_tensor *new_tensor(vt_graph *g, vt_kind kind, int ndim, const int *shape) {
    if (g->err.msg[0]) return NULL;
    if (g->finalized) return vt_fail(g, "graph", "cannot add tensors after finalize");
    if (ndim < 0 || ndim > VT_MAXDIM) return vt_fail(g, "tensor", "%d dimensions (max %d)", ndim, VT_MAXDIM);
    for (int i = 0; i < ndim; i++)
        if (shape[i] <= 0) return vt_fail(g, "tensor", "dimension %d has size %d", i, shape[i]);
    const int64_t numel = vt_shape_numel(ndim, shape);
    if (numel > VT_MAX_NUMEL)
        return vt_fail(g, "tensor", "%lld elements exceed " VT_NUMEL_LIMIT_MSG "; use a smaller batch or image",
                       (long long)numel, VT_MAX_NUMEL);
    if (grow(g, (void ***)&g->tens, g->nt, &g->tcap)) return NULL;
    vt_tensor *t = vt_alloc(sizeof(*t), &g->err);
    if (!t) return NULL;
    t->kind = kind;
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++) t->shape[i] = shape[i];
    t->numel = numel;
    t->prod = -1;
    t->last_use = -1;
    t->bwd_last = -1;
    g->tens[g->nt++] = t;
    return t;
}

vt_tensor *vt_input(vt_graph *g, const char *name, int ndim, const int *shape) {
    vt_tensor *t = new_tensor(g, VT_INPUT, ndim, shape);
    if (t) snprintf(t->name, sizeof t->name, "%s", name);
    return t;
}

vt_tensor *vt_new_act(vt_graph *g, int ndim, const int *shape) { return new_tensor(g, VT_ACT, ndim, shape); }

static vt_tensor *store_add(vt_graph *g, const char *name, vt_kind kind, int ndim, const int *shape, vt_init init) {
    if (g->err.msg[0]) return NULL;
    char full[VT_NAMELEN + 8];
    snprintf(full, sizeof full, "%s", name);
    int existed = vt_params_find(g->P, full) != NULL;
    vt_tensor *t = vt_params_add(g->P, full, kind, ndim, shape, init, &g->err);
    if (t && !existed) t->scope = g->cur_scope;
    return t;
}

vt_tensor *vt_param(vt_graph *g, const char *name, int ndim, const int *shape, vt_init init) {
    return store_add(g, name, VT_PARAM, ndim, shape, init);
}

vt_tensor *vt_buffer(vt_graph *g, const char *name, int ndim, const int *shape, vt_init init) {
    return store_add(g, name, VT_BUFFER, ndim, shape, init);
}

vt_tensor *vt_buffer_fixed(vt_graph *g, const char *name, int ndim, const int *shape, const float *values) {
    const int existed = !g->err.msg[0] && vt_params_find(g->P, name) != NULL;
    vt_tensor *t = store_add(g, name, VT_BUFFER, ndim, shape, (vt_init){VT_INIT_FIXED, 0.0f});
    if (t && !existed && t->data) memcpy(t->data, values, sizeof(float) * (size_t)t->numel);
    return t;
}

static int constant_at(const vt_graph *g, const vt_tensor *t, int depth) {
    const vt_tensor *r = vt_root((vt_tensor *)t);
    if (r->kind == VT_PARAM || r->kind == VT_BUFFER) return 1;
    if (r->kind != VT_ACT || r->prod < 0 || depth == 0) return 0;
    const vt_node *n = g->nodes[r->prod];
    for (int i = 0; i < n->nin; i++)
        if (!constant_at(g, n->in[i], depth - 1)) return 0;
    return 1;
}

int vt_graph_is_constant(const vt_graph *g, const vt_tensor *t) { return constant_at(g, t, 8); }

static const char *scope_name(const void *g, int k) { return ((const vt_graph *)g)->scopes[k]; }

void vt_scope(vt_graph *g, const char *scope) {
    const int i = vt_name_index_find(&g->scope_index, scope, scope_name, g);
    if (i >= 0) {
        g->cur_scope = i;
        return;
    }
    if (grow(g, (void ***)&g->scopes, g->nscopes, &g->scap)) return;
    char *s = malloc(strlen(scope) + 1);
    if (!s) {
        vt_seterr_code(&g->err, VT_E_NOMEM, "out of memory");
        return;
    }
    strcpy(s, scope);
    g->scopes[g->nscopes] = s;
    if (vt_name_index_add(&g->scope_index, g->nscopes, scope_name, g, &g->err)) {
        free(s);
        return;
    }
    g->cur_scope = g->nscopes++;
}

static void use(vt_tensor *t, int node) {
    t = vt_root(t);
    if (node > t->last_use) t->last_use = node;
}

vt_node *vt_new_node(vt_graph *g, const vt_opdef *op, vt_tensor **in, int nin, vt_tensor *out) {
    if (g->err.msg[0] || !out) return NULL;
    if (nin > VT_MAXIN) {
        vt_fail(g, op->name, "too many inputs (%d)", nin);
        return NULL;
    }
    for (int i = 0; i < nin; i++)
        if (in[i]->consumed) {
            vt_fail(g, op->name, "input %s was fused into a residual add and cannot be used again", in[i]->name);
            return NULL;
        }
    if (grow(g, (void ***)&g->nodes, g->nn, &g->ncap)) return NULL;
    vt_node *n = vt_alloc(sizeof(*n), &g->err);
    if (!n) return NULL;
    n->op = op;
    n->kind = op->kind;
    n->g = g;
    n->nin = nin;
    n->out = out;
    n->index = g->nn;
    n->scope = g->cur_scope;
    for (int i = 0; i < nin; i++) {
        n->in[i] = in[i];
        use(in[i], n->index);
        if (in[i]->requires_grad) out->requires_grad = 1, n->rg_in |= 1u << i;
    }
    out->prod = n->index;
    snprintf(out->name, sizeof out->name, "%.60s#%d", op->name, n->index);
    g->nodes[g->nn++] = n;
    return n;
}

int vt_node_add_input(vt_node *n, vt_tensor *t) {
    if (n->nin >= VT_MAXIN) {
        vt_fail(n->g, n->op->name, "too many inputs (%d)", n->nin + 1);
        return -1;
    }
    if (t->requires_grad) n->out->requires_grad = 1, n->rg_in |= 1u << n->nin;
    n->in[n->nin++] = t;
    use(t, n->index);
    return 0;
}

/* A 1-D planned buffer of numel elements for node n, refused (naming the op) past the per-tensor limit. */
static vt_tensor *node_buffer(vt_node *n, vt_kind kind, int64_t numel, const char *what) {
    if (numel < 1 || numel > VT_MAX_NUMEL) {
        vt_fail(n->g, n->op->name, "%s buffer of %lld elements is outside 1 to " VT_NUMEL_LIMIT_MSG "; use a smaller "
                "batch or image size", what, (long long)numel, VT_MAX_NUMEL);
        return NULL;
    }
    const int shape[1] = {(int)numel};
    return new_tensor(n->g, kind, 1, shape);
}

vt_tensor *vt_node_extra_output(vt_node *n, int ndim, const int *shape) {
    vt_tensor *t = new_tensor(n->g, VT_ACT, ndim, shape);
    if (!t) return NULL;
    t->prod = n->index;
    t->is_output = 1;
    snprintf(t->name, sizeof t->name, "%.50s#%d.extra", n->op->name, n->index);
    n->xout = t;
    return t;
}

int vt_graph_export_map(vt_graph *g, const vt_attn_map *m) {
    if (!g->export_maps || g->err.msg[0] || !m || (m->form == VT_MAP_FULL ? !m->t : !m->q || !m->k)) return 0;
    if (grow(g, (void ***)&g->maps, g->nmaps, &g->mapcap)) return -1;
    vt_attn_map *c = vt_alloc(sizeof(*c), &g->err);
    if (!c) return -1;
    *c = *m;
    if (!c->px) c->px = g->map_px;
    for (int k = 2, clash = 1; clash && k < 1000; k++) { /* a block exporting twice under one name: name.2, ... */
        clash = 0;
        for (int i = 0; i < g->nmaps && !clash; i++) clash = strcmp(g->maps[i]->name, c->name) == 0;
        if (clash) snprintf(c->name, sizeof c->name, "%.100s.%d", m->name, k);
    }
    vt_graph_output(g, m->t);
    vt_graph_output(g, m->q);
    vt_graph_output(g, m->k);
    vt_graph_output(g, m->kbias);
    g->maps[g->nmaps++] = c;
    return 0;
}

vt_tensor *vt_node_save(vt_node *n, int slot, int64_t numel) {
    vt_tensor *t = node_buffer(n, VT_SAVED, numel, "saved");
    if (!t) return NULL;
    t->prod = n->index;
    n->save[slot] = t;
    return t;
}

vt_tensor *vt_node_work(vt_node *n, int which, int64_t numel) {
    vt_tensor *t = node_buffer(n, VT_WORK, numel, which ? "backward scratch" : "forward scratch");
    if (!t) return NULL;
    t->prod = n->index;
    t->last_use = which; /* 0 forward, 1 backward (resolved by the planner) */
    if (which)
        n->bws = t;
    else
        n->fws = t;
    return t;
}

vt_tensor *vt_kernel_work(vt_node *n, vt_dtype dtype, int64_t numel) {
    if (n->g->finalized) return vt_fail(n->g, n->op->name, "kernel scratch requested after planning");
    vt_tensor *t = node_buffer(n, VT_WORK, numel, "kernel scratch");
    if (!t) return NULL;
    t->dtype = dtype;
    t->prod = n->index;
    t->last_use = 0;
    n->kws = t;
    return t;
}

int vt_node_fallback(vt_node *n, int for_good) {
    if (for_good) n->kern = NULL;
    vt_tensor *t = n->fws;
    if (!t || t->data) return 0;
    t->data = vt_alloc((size_t)t->numel * (size_t)vt_dtype_size(t->dtype), NULL);
    if (t->data) {
        t->heap = 1;
        return 0;
    }
    float *y = n->out->data;
    for (int64_t i = 0; i < n->out->numel; i++) y[i] = NAN;
    return -1;
}

vt_tensor *vt_view_range(vt_graph *g, vt_tensor *x, int64_t off, int ndim, const int *shape) {
    if (vt_bad(g, 1, x)) return NULL;
    const int64_t n = vt_shape_numel(ndim, shape);
    if (n < 1 || off < 0 || off > x->numel - n) {
        char a[64];
        return vt_fail(g, "view", "elements [%lld, %lld) (%d dims) are not inside %s (%lld elements)", (long long)off,
                       (long long)(off + n), ndim, vt_shape_str(x, a, sizeof a), (long long)x->numel);
    }
    vt_tensor *t = new_tensor(g, VT_ACT, ndim, shape);
    if (!t) return NULL;
    t->view_of = x;
    t->view_off = off;
    t->requires_grad = x->requires_grad;
    snprintf(t->name, sizeof t->name, "view(%.100s)", x->name);
    return t;
}

vt_tensor *vt_reshape(vt_graph *g, vt_tensor *x, int ndim, const int *shape) {
    if (vt_bad(g, 1, x)) return NULL;
    if (vt_shape_numel(ndim, shape) != x->numel) {
        char a[64];
        return vt_fail(g, "reshape", "cannot view %s (%lld elements) with %d dims of %lld elements",
                       vt_shape_str(x, a, sizeof a), (long long)x->numel, ndim,
                       (long long)vt_shape_numel(ndim, shape));
    }
    return vt_view_range(g, x, 0, ndim, shape);
}

int vt_reduce_shape(const vt_tensor *x, int axis, int *shape, int64_t *outer, int64_t *inner) {
    const int ax = axis < 0 ? axis + x->ndim : axis;
    if (x->ndim < 1 || ax < 0 || ax >= x->ndim) return -1;
    int k = 0;
    *outer = *inner = 1;
    for (int d = 0; d < x->ndim; d++) {
        if (d < ax) *outer *= x->shape[d];
        if (d > ax) *inner *= x->shape[d];
        if (d != ax) shape[k++] = x->shape[d];
    }
    return k;
}

void vt_graph_output(vt_graph *g, vt_tensor *t) {
    if (t) vt_root(t)->is_output = 1;
    (void)g;
}

void vt_graph_set_loss(vt_graph *g, vt_tensor *t) {
    g->loss = t;
    vt_graph_output(g, t);
}

/* ---- memory planning ----
 * The timeline: the forward of node p runs at step p and, in train graphs, its backward at step 2n-1-p (n nodes).
 * Every planned buffer gets a live interval [start, end] of steps, and `place` gives buffers whose intervals overlap
 * disjoint offsets. THE INVARIANT: a buffer's interval covers every step at which a kernel reads or writes it. Memory
 * is shared only by buffers with disjoint intervals, so no kernel's write can then clobber a value that a later
 * forward or backward still reads. Intervals, for the root of each view chain (views alias their root):
 *  - VT_ACT, eval graph: [producer, last forward reader]; train graph: [producer, the latest of its last forward
 *    reader and the backward step of every node whose backward reads it (bwd_last: through any view, as an input or
 *    as that node's own output, per vt_opdef.bwd_reads)]. An op that declares nothing reads, by assumption,
 *    everything it was given, for as long as before declarations existed: its inputs and output are kept until
 *    their producers' backward. A node whose output needs no gradient never runs its backward, so it reads nothing.
 *    Graph outputs (and the loss) live to the end; graph inputs for the whole run.
 *  - its gradient (train graphs): from the backward of its last forward reader (the first to accumulate into it) to
 *    its producer's backward (the last to read it);
 *  - VT_SAVED: from its node's forward to its node's backward; VT_WORK: its node's step only.
 * g->keep_all restores the plan from before declarations: every activation lives to its producer's backward. */

typedef struct {
    int64_t size, off;
    int start, end;
    int64_t *dst;
} buf_t;

static int cmp_size(const void *a, const void *b) {
    const buf_t *x = a, *y = b;
    return (x->size < y->size) - (x->size > y->size);
}

/* First-fit placement of buffers with live intervals, largest first; returns the arena size in bytes. The buffers
 * placed so far are kept in offset order, so each new one scans only them, skipping those not live with it, for the
 * lowest gap that fits (a qsort of the live ones per buffer made a graph of 50,000 buffers take minutes). */
static int64_t place(buf_t *b, int nb, vt_err *e) {
    qsort(b, (size_t)nb, sizeof *b, cmp_size);
    buf_t **placed = malloc(sizeof(*placed) * (size_t)(nb + 1));
    if (!placed) return vt_seterr_code(e, VT_E_NOMEM, "out of memory planning the graph");
    int64_t total = 0;
    for (int i = 0; i < nb; i++) {
        int64_t off = 0;
        for (int j = 0; j < i; j++) {
            const buf_t *p = placed[j];
            if (p->start > b[i].end || b[i].start > p->end) continue; /* not live at the same time */
            if (p->off - off >= b[i].size) break;
            if (p->off + p->size > off) off = p->off + p->size;
        }
        b[i].off = off;
        *b[i].dst = off;
        if (off + b[i].size > total) total = off + b[i].size;
        int k = i; /* after the placed buffers at offsets <= off */
        while (k > 0 && placed[k - 1]->off > off) k--;
        memmove(placed + k + 1, placed + k, sizeof(*placed) * (size_t)(i - k));
        placed[k] = &b[i];
    }
    free(placed);
    return total;
}

/* Sets bwd_last of every root read by some backward (see the planning notes above). */
static void mark_backward_reads(vt_graph *g) {
    const int n = g->nn;
    for (int i = 0; i < n; i++) {
        const vt_node *nd = g->nodes[i];
        if (!nd->out->requires_grad || !nd->op->backward) continue; /* vt_graph_backward never runs it */
        const unsigned r = nd->op->bwd_reads;
        for (int k = 0; k <= nd->nin; k++) {
            vt_tensor *t = vt_root(k < nd->nin ? nd->in[k] : nd->out);
            int until = 2 * n - 1 - i;
            if (!(r & VT_READS_DECLARED)) {
                if (t->prod >= 0) until = 2 * n - 1 - t->prod; /* undeclared: kept as long as ever */
            } else if (!(r & (k < nd->nin ? VT_READS_IN(k) : VT_READS_OUT))) {
                continue;
            }
            if (until > t->bwd_last) t->bwd_last = until;
        }
    }
}

/* Bytes of a planned buffer of numel elements of size esize: a multiple of 64, so every offset stays 64-byte
 * aligned. */
static int64_t aligned_bytes(int64_t numel, int esize) { return (numel * esize + 63) / 64 * 64; }

/* Each node's forward kernel (vt_kernel), on the threads it will run on; the scratch it does not use is left out of
 * the plan: a refused kernel's (vt_kernel_work), and the op's forward scratch when a kernel without ref_scratch
 * runs the node. */
static void choose_kernels(vt_graph *g) {
    for (int i = 0; i < g->nn && !g->err.msg[0]; i++) {
        vt_node *nd = g->nodes[i];
        nd->kern = NULL;
        for (const vt_kernel *const *k = nd->op->kernels; k && *k && !g->ref_kernels && !nd->kern; k++) {
            if ((*k)->prepare(nd)) {
                nd->kern = *k;
            } else if (nd->kws) {
                nd->kws->unplanned = 1;
                nd->kws = NULL;
            }
        }
        if (nd->kern && !nd->kern->ref_scratch && nd->fws) nd->fws->unplanned = 1;
    }
}

/* Eval graphs: marks the nodes whose inputs are all parameters, buffers or constant nodes' outputs (a BatchNorm folded
 * into a conv's weight, Swin's shift mask, SimpleViT's position embedding). Their outputs get buffers of their own
 * (planned over the whole forward, never shared) and vt_graph_forward runs them again only after the parameters
 * changed: Next-ViT-S's folded BatchNorms were 1.6% of a batch-1 inference step, GroupMixFormer-M's 2.5%. */
static void mark_constant(vt_graph *g) {
    for (int i = 0; i < g->nn; i++) {
        vt_node *nd = g->nodes[i];
        nd->constant = !g->training && !nd->xout;
        for (int k = 0; k < nd->nin && nd->constant; k++) {
            const vt_tensor *r = vt_root(nd->in[k]);
            nd->constant = r->kind == VT_PARAM || r->kind == VT_BUFFER ||
                           (r->kind == VT_ACT && r->prod >= 0 && g->nodes[r->prod]->constant);
        }
    }
}

int vt_graph_finalize(vt_graph *g, vt_err *e) {
    if (g->err.msg[0]) return vt_seterr_from(e, &g->err, "%s", g->err.msg);
    if (g->finalized) return 0;
    if (g->P->shapes_only) return vt_seterr(e, "graph over a shapes-only parameter store cannot run");
    if (g->allsum && g->replicas < 1) return vt_seterr(e, "vt_graph.allsum is set with %d replicas", g->replicas);
    for (int i = 0; g->training && i < g->nn; i++) /* the ops sized their backward scratch by these flags; a view
                                                     * (a reshaped weight) follows its source */
        for (int k = 0; k < g->nodes[i]->nin; k++) {
            const vt_tensor *r = vt_root(g->nodes[i]->in[k]);
            if (!((g->nodes[i]->rg_in >> k) & 1) != !r->requires_grad)
                return vt_seterr(e, "%s: input %d (%s) was %s after the op was built on it (freeze or unfreeze "
                                 "parameters before building)", g->nodes[i]->out->name, k, r->name,
                                 r->requires_grad ? "unfrozen" : "frozen");
        }
    if (g->training && vt_params_alloc_grads(g->P, e)) return -1;
    mark_constant(g);
    choose_kernels(g);
    if (g->err.msg[0]) return vt_seterr_from(e, &g->err, "%s", g->err.msg);
    const int n = g->nn, T = g->training ? 2 * n : n, last = T - 1;
    buf_t *b = vt_alloc(sizeof(*b) * (size_t)(2 * g->nt + 1), e);
    if (!b) return -1;
    if (g->training) mark_backward_reads(g);
    int nb = 0;
    for (int i = 0; i < g->nt; i++) {
        vt_tensor *t = g->tens[i];
        if (t->view_of || t->unplanned) continue;
        int s = 0, en = last, p = t->prod;
        switch (t->kind) {
        case VT_INPUT: break;
        case VT_ACT:
            if (p < 0) continue; /* never produced: unused */
            s = p;
            if (g->nodes[p]->constant) { /* kept from one forward to the next */
                s = 0;
                en = last;
            } else if (t->is_output) {
                en = last;
            } else if (g->training && g->keep_all) {
                en = 2 * n - 1 - p;
            } else {
                en = t->last_use > p ? t->last_use : p;
                if (t->bwd_last > en) en = t->bwd_last;
            }
            break;
        case VT_SAVED:
            s = p;
            en = g->training ? 2 * n - 1 - p : p;
            break;
        case VT_WORK:
            if (t->last_use == 1 && !g->training) { /* backward scratch is never used in eval */
                t->data = NULL;
                continue;
            }
            s = en = t->last_use == 1 ? 2 * n - 1 - p : p;
            break;
        default: continue;
        }
        b[nb++] = (buf_t){aligned_bytes(t->numel, vt_dtype_size(t->dtype)), 0, s, en, &t->off};
        if (g->training && t->kind == VT_ACT && t->requires_grad) {
            t->grad_start = t->last_use >= 0 ? 2 * n - 1 - t->last_use : 2 * n - 1 - p;
            b[nb++] = (buf_t){aligned_bytes(t->numel, sizeof(float)), 0, t->grad_start, 2 * n - 1 - p, &t->goff};
        } else {
            t->goff = -1;
        }
    }
    int64_t total = place(b, nb, e);
    vt_free(b);
    if (total < 0) return -1;
    g->arena_bytes = total;
    g->arena = vt_alloc((size_t)(total ? total : 1), e);
    if (!g->arena) return -1;
    for (int i = 0; i < g->nt; i++) {
        vt_tensor *t = g->tens[i];
        if (t->view_of || t->unplanned || (t->kind == VT_WORK && t->last_use == 1 && !g->training)) continue;
        if (t->kind == VT_ACT && t->prod < 0) continue;
        t->data = (float *)(void *)(g->arena + t->off);
        t->grad = t->goff >= 0 ? (float *)(void *)(g->arena + t->goff) : NULL;
    }
    for (int i = 0; i < g->nt; i++) { /* views alias their source (created after it, so resolve in order) */
        vt_tensor *t = g->tens[i];
        if (!t->view_of) continue;
        const vt_tensor *r = t->view_of;
        t->data = r->data ? r->data + t->view_off : NULL;
        t->grad = r->grad ? r->grad + t->view_off : NULL;
    }
    g->finalized = 1;
    return 0;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Runs a node's forward (bwd = 0) or backward kernel, timing it when profiling (a fused node's vt_gemm calls too). */
static void run_node(vt_graph *g, vt_node *nd, int bwd) {
    double t = g->node_s ? now_s() : 0.0, *calls = g->node_s && nd->kind == VT_OP_FUSED ? g->gemm.calls_s : NULL;
    if (calls)
        for (int k = 0; k < g->threads; k++) calls[(size_t)k * VT_GEMM_PROF_STRIDE] = 0.0;
    if (bwd)
        nd->op->backward(nd);
    else if (nd->kern)
        nd->kern->forward(nd);
    else
        nd->op->forward(nd);
    if (g->node_s) g->node_s[nd->index] += now_s() - t;
    if (calls) {
        double s = 0.0;
        for (int k = 0; k < g->threads; k++) s += calls[(size_t)k * VT_GEMM_PROF_STRIDE];
        g->node_gemm_s[nd->index] += s / g->threads;
    }
}

/* Sets flush-to-zero and denormals-are-zero in the calling thread and every OpenMP thread: subnormal floats (e.g.
 * from a diverging learning rate) otherwise slow every arithmetic op by ~100x; the results are the same to float
 * precision for normal values. Rounding is set to nearest too: a caller's fesetround(FE_UPWARD) had moved the
 * results of the work its own thread did (not its pool's). The bits persist in the pool's threads; setting them
 * again costs a parallel region. */
static void flush_denormals(void) {
#if defined(__SSE2__)
#define VT_MXCSR(c) (((c) & ~0x6000u) | 0x8040u) /* rounding control (bits 13-14) nearest; FTZ (15) | DAZ (6) */
#pragma omp parallel
    _mm_setcsr(VT_MXCSR(_mm_getcsr()));
    _mm_setcsr(VT_MXCSR(_mm_getcsr()));
#undef VT_MXCSR
#endif
}

vt_threads_env vt_threads_enter(int threads) {
    const vt_threads_env prev = {omp_get_max_threads(), omp_get_dynamic()};
    if (prev.threads != threads) omp_set_num_threads(threads);
    if (prev.dynamic) omp_set_dynamic(0);
    return prev;
}

void vt_threads_leave(vt_threads_env prev) {
    if (omp_get_max_threads() != prev.threads) omp_set_num_threads(prev.threads);
    if (prev.dynamic) omp_set_dynamic(1);
}

void vt_graph_forward(vt_graph *g) {
    const vt_threads_env prev = vt_threads_enter(g->threads); /* the count its scratch was sized for */
    flush_denormals();
    const int held = g->const_gen == g->P->gen + 1; /* the constant nodes' outputs are current */
    for (int i = 0; i < g->nn; i++)
        if (!(held && g->nodes[i]->constant)) run_node(g, g->nodes[i], 0);
    if (g->training) vt_params_changed(g->P); /* BatchNorm running statistics moved */
    else g->const_gen = g->P->gen + 1;
    g->fwd_ready = g->training;
    vt_threads_leave(prev);
}

int vt_graph_enable_profile(vt_graph *g, vt_err *e) {
    if (!g->finalized) return vt_seterr(e, "vt_graph_enable_profile: the graph is not finalized");
    if (g->node_s) return 0;
    const size_t nc = (size_t)(g->threads > 0 ? g->threads : 1) * VT_GEMM_PROF_STRIDE;
    g->node_s = vt_alloc(sizeof(double) * (size_t)(g->nn + 1), e);
    g->node_gemm_s = g->node_s ? vt_alloc(sizeof(double) * (size_t)(g->nn + 1), e) : NULL;
    g->gemm.calls_s = g->node_gemm_s ? vt_alloc(sizeof(double) * nc, e) : NULL;
    if (g->gemm.calls_s) return 0;
    vt_free(g->node_s); /* all or none: the profile's readers test node_s alone */
    vt_free(g->node_gemm_s);
    g->node_s = g->node_gemm_s = NULL;
    return -1;
}

/* The PROFILE_TOP nodes that took longest (forward + backward): scope, kernel, first input's and output's shapes. */
#define PROFILE_TOP 12
static void print_slowest(const vt_graph *g, double total, FILE *f) {
    int top[PROFILE_TOP], nt = 0;
    for (int i = 0; i < g->nn; i++) { /* insertion into the top list, slowest first */
        int k = nt < PROFILE_TOP ? nt++ : PROFILE_TOP;
        while (k > 0 && g->node_s[top[k - 1]] < g->node_s[i]) {
            if (k < PROFILE_TOP) top[k] = top[k - 1];
            k--;
        }
        if (k < PROFILE_TOP) top[k] = i;
    }
    fprintf(f, "slowest nodes:\n%-6s %-44s %-22s %8s %6s  %s\n", "node", "scope", "op", "seconds", "share",
           "input -> output");
    for (int j = 0; j < nt; j++) {
        const vt_node *nd = g->nodes[top[j]];
        char a[64], b[64];
        fprintf(f, "%-6d %-44.44s %-22.22s %8.4f %5.1f%%  %s -> %s\n", nd->index, g->scopes[nd->scope],
               nd->kern ? nd->kern->name : nd->op->name, g->node_s[top[j]], 100.0 * g->node_s[top[j]] / total,
               nd->nin ? vt_shape_str(nd->in[0], a, sizeof a) : "()", vt_shape_str(nd->out, b, sizeof b));
    }
}

void vt_graph_profile_split(const vt_graph *g, double share[VT_OP_KINDS]) {
    double total = 0.0;
    for (int k = 0; k < VT_OP_KINDS; k++) share[k] = 0.0;
    for (int i = 0; g->node_s && i < g->nn; i++) {
        share[g->nodes[i]->kind] += g->node_s[i];
        total += g->node_s[i];
    }
    for (int k = 0; k < VT_OP_KINDS && total > 0.0; k++) share[k] /= total;
}

double vt_graph_profile_fused_gemm(const vt_graph *g) {
    double total = 0.0, in = 0.0;
    for (int i = 0; g->node_s && i < g->nn; i++) {
        total += g->node_s[i];
        in += g->node_gemm_s[i];
    }
    return total > 0.0 ? in / total : 0.0;
}

void vt_graph_print_profile(const vt_graph *g, FILE *f) {
    if (!g->node_s || !f) return;
    static const char *const kind_names[VT_OP_KINDS] = {"other", "gemm", "fused"};
    const char *names[64];
    double t[64] = {0}, gt[64] = {0}, total = 0.0; /* gt: a fused op's time in its GEMM calls */
    int64_t macs[64] = {0};
    vt_op_kind kinds[64];
    int n = 0;
    for (int i = 0; i < g->nn; i++) {
        int k = 0;
        const char *name = g->nodes[i]->kern ? g->nodes[i]->kern->name : g->nodes[i]->op->name;
        while (k < n && (strcmp(names[k], name) != 0 || kinds[k] != g->nodes[i]->kind)) k++; /* a row per kind */
        if (k == n && n < 64) {
            kinds[n] = g->nodes[i]->kind;
            names[n++] = name;
        }
        if (k < n) {
            t[k] += g->node_s[i];
            gt[k] += g->node_gemm_s[i];
            macs[k] += g->nodes[i]->macs;
        }
        total += g->node_s[i];
    }
    if (!(total > 0.0)) total = 1.0; /* nothing ran yet: every share 0% */
    for (int i = 0; i < n; i++) /* selection sort by time, descending */
        for (int j = i + 1; j < n; j++)
            if (t[j] > t[i]) {
                double tt = t[i]; t[i] = t[j]; t[j] = tt;
                tt = gt[i]; gt[i] = gt[j]; gt[j] = tt;
                int64_t mm = macs[i]; macs[i] = macs[j]; macs[j] = mm;
                const char *nn = names[i]; names[i] = names[j]; names[j] = nn;
                vt_op_kind kk = kinds[i]; kinds[i] = kinds[j]; kinds[j] = kk;
            }
    fprintf(f, "%-24s %10s %7s %14s  %s\n", "op", "seconds", "share", "forward MACs", "kind");
    for (int i = 0; i < n; i++) {
        fprintf(f, "%-24s %10.4f %6.1f%% %14lld  %s", names[i], t[i], 100.0 * t[i] / total, (long long)macs[i],
               kind_names[kinds[i]]);
        if (kinds[i] == VT_OP_FUSED) fprintf(f, " (%.1f%% in GEMM calls)", 100.0 * gt[i] / total);
        fputc('\n', f);
    }
    double sh[VT_OP_KINDS];
    vt_graph_profile_split(g, sh);
    const double fg = vt_graph_profile_fused_gemm(g);
    fprintf(f, "by kind: GEMM ops %.1f%%, GEMMs fused with other work (attention, DLA, GMA aggregators) %.1f%% (%.1f%% "
           "in their GEMM calls), other ops %.1f%%; outside GEMM calls %.1f%%\n",
           100.0 * sh[VT_OP_GEMM], 100.0 * sh[VT_OP_FUSED], 100.0 * fg, 100.0 * sh[VT_OP_OTHER],
           100.0 * (sh[VT_OP_FUSED] - fg + sh[VT_OP_OTHER]));
    print_slowest(g, total, f);
}

/* Zeroes the gradient of t's root if its live range begins at backward step s (seeds the loss with 1). */
static void grad_begin(vt_graph *g, vt_tensor *t, int s) {
    t = vt_root(t);
    if (t->kind != VT_ACT || !t->grad || t->grad_start != s) return;
    vt_zero(t->grad, t->numel);
    if (g->loss && vt_root(g->loss) == t) t->grad[vt_root_offset(g->loss)] = 1.0f;
}

/* Begins the gradients that start at backward step s, nd's step: zeroes them, except those of nd's grad_sets slots
 * that cover their root's memory and share it with no other slot of nd, which nd's backward writes first (set in
 * nd->grad_fresh; NaN when poisoned, so a backward that leaves an element unwritten shows in the tests). */
static void grads_begin(vt_graph *g, vt_node *nd, int s, int poisoned) {
    nd->grad_fresh = 0;
    grad_begin(g, nd->out, s);
    const int runs = nd->out->requires_grad && nd->out->grad && nd->op->backward;
    for (int k = 0; k < nd->nin; k++) {
        vt_tensor *t = vt_root(nd->in[k]);
        int fresh = runs && (nd->grad_sets >> k & 1u) && t->kind == VT_ACT && t->grad && t->grad_start == s &&
                    vt_root(nd->out) != t && nd->in[k]->numel == t->numel && /* not a part (vt_view_range) */
                    !(g->loss && vt_root(g->loss) == t); /* the loss read by a later node: its seed goes first */
        for (int j = 0; fresh && j < nd->nin; j++) fresh = j == k || vt_root(nd->in[j]) != t;
        if (!fresh) {
            grad_begin(g, nd->in[k], s);
            continue;
        }
        nd->grad_fresh |= 1u << k;
        if (poisoned)
            for (int64_t i = 0; i < t->numel; i++) t->grad[i] = NAN;
    }
}

/* Runs node nd's backward with the roots of its slots that it does not declare reading (vt_opdef.bwd_reads) filled
 * with NaN, restoring them after (keep, cap: a reusable save area). Returns -1 (error set) if out of memory. */
static int run_poisoned(vt_graph *g, vt_node *nd, float **keep, int64_t *cap, vt_err *e) {
    const unsigned r = nd->op->bwd_reads;
    vt_tensor *slot[VT_MAXIN + 1], *poison[VT_MAXIN + 1];
    int np = 0;
    int64_t total = 0;
    for (int k = 0; k <= nd->nin; k++) slot[k] = vt_root(k < nd->nin ? nd->in[k] : nd->out);
    for (int k = 0; (r & VT_READS_DECLARED) && k <= nd->nin; k++) {
        int skip = !slot[k]->data;
        for (int j = 0; j <= nd->nin; j++) /* the same memory is read through a declared slot */
            skip |= slot[j] == slot[k] && (r & (j < nd->nin ? VT_READS_IN(j) : VT_READS_OUT));
        for (int j = 0; j < np; j++) skip |= poison[j] == slot[k]; /* listed already */
        if (skip) continue;
        poison[np++] = slot[k];
        total += slot[k]->numel;
    }
    if (total > *cap) {
        vt_free(*keep);
        *cap = total;
        if (!(*keep = vt_alloc(sizeof(float) * (size_t)total, e))) return -1;
    }
    int64_t off = 0;
    for (int k = 0; k < np; off += poison[k]->numel, k++) {
        memcpy(*keep + off, poison[k]->data, sizeof(float) * (size_t)poison[k]->numel);
        for (int64_t j = 0; j < poison[k]->numel; j++) poison[k]->data[j] = NAN;
    }
    run_node(g, nd, 1);
    off = 0;
    for (int k = 0; k < np; off += poison[k]->numel, k++)
        memcpy(poison[k]->data, *keep + off, sizeof(float) * (size_t)poison[k]->numel);
    return 0;
}

/* The backward pass; poisoned: every node's backward through run_poisoned. */
static int backward_pass(vt_graph *g, int poisoned, vt_err *e) {
    const vt_threads_env prev = vt_threads_enter(g->threads); /* the count its scratch was sized for */
    flush_denormals();
    const int n = g->nn;
    float *keep = NULL;
    int64_t cap = 0;
    int rc = 0;
    for (int i = n - 1; i >= 0 && rc == 0; i--) {
        vt_node *nd = g->nodes[i];
        int s = 2 * n - 1 - i;
        grads_begin(g, nd, s, poisoned);
        if (nd->out->requires_grad && nd->op->backward) {
            if (!poisoned)
                run_node(g, nd, 1);
            else
                rc = run_poisoned(g, nd, &keep, &cap, e);
        }
        if (rc == 0 && g->bwd_hook) g->bwd_hook(g->bwd_hook_ctx, i);
    }
    vt_free(keep);
    vt_threads_leave(prev);
    return rc;
}

/* 0 when g may run backward now (a training graph forwarded since its last backward, which this one consumes), else
 * -1 with the reason in e. */
static int backward_ready(vt_graph *g, vt_err *e) {
    if (!g->training) return vt_seterr(e, "vt_graph_backward: the graph was built for inference");
    if (!g->fwd_ready)
        return vt_seterr(e, "vt_graph_backward: no forward since the last backward (backward overwrites activations "
                         "only it reads: run vt_graph_forward first)");
    g->fwd_ready = 0;
    return 0;
}

int vt_graph_backward(vt_graph *g) { return backward_ready(g, &g->err) ? -1 : backward_pass(g, 0, NULL); }

int vt_graph_backward_poisoned(vt_graph *g, vt_err *e) {
    /* Poisoning writes into every slot's memory, which must still belong to that slot: in the keep_all plan every
     * input and output of a node is live until the node's backward has run; in the default plan an unread one may
     * already share its memory with a live buffer (a gradient, this node's scratch). */
    if (!g->training || !g->keep_all) return vt_seterr(e, "the poisoned backward needs a train graph planned keep_all");
    return backward_ready(g, e) ? -1 : backward_pass(g, 1, e);
}

int64_t vt_graph_macs(const vt_graph *g) {
    int64_t m = 0;
    for (int i = 0; i < g->nn; i++) m += g->nodes[i]->macs;
    return m;
}

int64_t vt_graph_train_macs(const vt_graph *g) {
    int64_t m = 0;
    for (int i = 0; i < g->nn; i++) {
        const vt_node *n = g->nodes[i];
        int other = 0;
        for (int j = 1; j < n->nin; j++) other |= n->in[j]->requires_grad;
        const int first = n->nin > 0 && n->in[0]->requires_grad;
        m += n->macs * (1 + (n->bwd_twice ? 2 * (first | other) : first + other));
    }
    return m;
}

int64_t vt_graph_arena_bytes(const vt_graph *g) { return g->arena_bytes; }
