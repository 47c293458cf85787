/* The plan's oneDNN primitives in fp32 and their store (vt_gemm_prims: engine, stream, the lists the plan frees in
 * vt_gemm_plan_free): a linear layer's whole forward as one matmul primitive (vt_gemm_linear_prim, vt_gemm_prim_run;
 * rule 5 at vt_gemm_choose, gemm.c), convolutions, forward and weight gradient (vt_gemm_conv_prim,
 * vt_gemm_conv_wgrad), and an inference linear as a 1x1 convolution with its weight packed once (vt_gemm_linear_conv,
 * rule 12). A bf16 plan's linear primitives run here too, on bf16 copies made by gemm_lowp.c's helpers. */
#include <dnnl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gemm_priv.h"
#include "vitc/gemm.h"

struct vt_gemm_prim {
    int M, N, K, has_bias;
    vt_gemm_post post;
    dnnl_primitive_t prim;
    dnnl_memory_t x, w, b, r, y; /* descriptors with no data; run sets the handles */
    dnnl_stream_t stream;        /* the plan's */
    vt_gemm_prim *next;
    vt_gemm_prims *bf16;         /* a bf16 plan's store: x and w run as bf16 copies in its scratch; else NULL */
};

struct vt_gemm_conv {
    int geom[12]; /* B, C, H, W, Cout, k, s, pad, G, flags (VT_CONV_BIAS, _RELU, _ADD, _GELU), nchw, and the use:
                   * CONV_FWD, CONV_WGRAD, or CONV_LINEAR / CONV_LINEAR_BF16 (one layer's own, vt_gemm_linear_conv:
                   * never shared; BF16: x converted to bf16 at every run, the weight packed to bf16) */
    /* forward: the conv and the reorder of the plain weight w into its layout wp (in `packed`); wgrad
     * (vt_gemm_conv_wgrad): the weight-gradient conv of x and y (dy) into wp, and `pack` adds wp into w */
    dnnl_primitive_t prim, pack;
    dnnl_memory_t x, w, wp, b, y, r; /* r: VT_CONV_ADD's added term (y's layout) */
    void *packed;
    size_t wbytes;     /* packed's size */
    const float *wsrc; /* CONV_LINEAR: the weight `packed` holds (NULL: none yet) */
    vt_gemm_prims *bf16; /* CONV_LINEAR_BF16: the store whose scratch takes x's bf16 copy */
    /* NCHW and Winograd (conv_wino): the conv runs on the blocked layouts it picks; rx / ry reorder x into xb and yb
     * into y (wgrad: y into yb; NULL where the conv takes the plain layout), xb and yb live in the caller's scratch
     * (xb_bytes, then yb_bytes) */
    dnnl_primitive_t rx, ry;
    dnnl_memory_t xb, yb;
    size_t xb_bytes, yb_bytes;
    dnnl_stream_t stream;
    int split;     /* a grouped conv run one group at a time (conv_wino): the memories above are one group's, but
                    * `packed`, which holds every group's packed weight (or weight gradient), wstep bytes apart */
    size_t wstep;  /* bytes between two groups' packed weights in `packed` (split) */
    char impl[48]; /* oneDNN's name of the conv's kernel */
    vt_gemm_conv *next;
};

struct vt_gemm_bfw {
    uint16_t *data;    /* N·K bf16 values */
    size_t bytes;      /* data's size */
    const float *wsrc; /* the weight data holds (NULL: none yet) */
    vt_gemm_bfw *next;
};

enum { CONV_FWD = 0, CONV_WGRAD = 1, CONV_LINEAR = 2, CONV_LINEAR_BF16 = 3 }; /* vt_gemm_conv's use (geom[11]) */

static void prim_free(vt_gemm_prim *q) {
    if (q->prim) dnnl_primitive_destroy(q->prim);
    dnnl_memory_t m[5] = {q->x, q->w, q->b, q->r, q->y};
    for (int i = 0; i < 5; i++)
        if (m[i]) dnnl_memory_destroy(m[i]);
    free(q);
}

static void conv_free(vt_gemm_conv *q) {
    if (q->prim) dnnl_primitive_destroy(q->prim);
    if (q->pack) dnnl_primitive_destroy(q->pack);
    if (q->rx) dnnl_primitive_destroy(q->rx);
    if (q->ry) dnnl_primitive_destroy(q->ry);
    dnnl_memory_t m[8] = {q->x, q->w, q->wp, q->b, q->y, q->xb, q->yb, q->r};
    for (int i = 0; i < 8; i++)
        if (m[i]) dnnl_memory_destroy(m[i]);
    free(q->packed);
    free(q);
}

void vt_gemm_plan_free(vt_gemm_plan *p) {
    vt_gemm_prims *c = p->prims;
    if (!c) return;
    for (vt_gemm_prim *q = c->list, *nx; q; q = nx) {
        nx = q->next;
        prim_free(q);
    }
    for (vt_gemm_conv *q = c->convs, *nx; q; q = nx) {
        nx = q->next;
        conv_free(q);
    }
    for (vt_gemm_q8 *q = c->q8s, *nx; q; q = nx) {
        nx = q->next;
        vt_gemm_q8_free(q);
    }
    for (vt_gemm_bf *q = c->bfs, *nx; q; q = nx) {
        nx = q->next;
        vt_gemm_bf_free(q);
    }
    for (vt_gemm_bfw *q = c->bfws, *nx; q; q = nx) {
        nx = q->next;
        free(q->data);
        free(q);
    }
    free(c->bfbuf);
    if (c->stream) dnnl_stream_destroy(c->stream);
    if (c->eng) dnnl_engine_destroy(c->eng);
    free(c);
    p->prims = NULL;
}

size_t vt_gemm_weight_copy_bytes(const vt_gemm_plan *p) {
    const vt_gemm_prims *c = p->prims;
    size_t n = 0;
    for (const vt_gemm_conv *q = c ? c->convs : NULL; q; q = q->next)
        if (q->geom[11] >= CONV_LINEAR && q->wsrc) n += q->wbytes; /* a layer's packed weight, once packed */
    for (const vt_gemm_bfw *q = c ? c->bfws : NULL; q; q = q->next)
        if (q->wsrc) n += q->bytes;
    for (const vt_gemm_q8 *q = c ? c->q8s : NULL; q; q = q->next)
        if (q->wsrc) n += (q->wq ? (size_t)q->N * q->K : 0) + q->packed_bytes + 2 * sizeof(float) * (size_t)q->N;
    return n;
}

/* A dense row-major rows×cols matrix. */
static int md2(dnnl_memory_desc_t *d, int rows, int cols) {
    dnnl_dims_t dims = {rows, cols}, strides = {cols, 1};
    return dnnl_memory_desc_init_by_strides(d, 2, dims, dnnl_f32, strides) == dnnl_success ? 0 : -1;
}

/* Makes q's primitive and memory objects; returns 0 or -1. */
static int prim_make(vt_gemm_prims *c, vt_gemm_prim *q) {
    dnnl_memory_desc_t xd, wd, bd, yd;
    const dnnl_data_type_t dt = q->bf16 ? dnnl_bf16 : dnnl_f32;
    if (mdt(&xd, q->M, q->K, 0, dt) || mdt(&wd, q->K, q->N, 1, dt) || md2(&bd, 1, q->N) || md2(&yd, q->M, q->N))
        return -1;
    dnnl_matmul_desc_t mm;
    if (dnnl_matmul_desc_init(&mm, &xd, &wd, q->has_bias ? &bd : NULL, &yd) != dnnl_success) return -1;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t po = NULL;
    int bad = dnnl_primitive_attr_create(&attr) != dnnl_success || dnnl_post_ops_create(&po) != dnnl_success;
    if (!bad) bad = append_post(po, q->post, &yd);
    dnnl_primitive_desc_t pd = NULL;
    bad = finish_pd(c, &mm, attr, po, bad, &pd);
    if (!bad) bad = dnnl_primitive_create(&q->prim, pd) != dnnl_success;
    if (pd) dnnl_primitive_desc_destroy(pd);
    if (bad) return -1;
    return dnnl_memory_create(&q->x, &xd, c->eng, DNNL_MEMORY_NONE) != dnnl_success ||
                   dnnl_memory_create(&q->w, &wd, c->eng, DNNL_MEMORY_NONE) != dnnl_success ||
                   dnnl_memory_create(&q->y, &yd, c->eng, DNNL_MEMORY_NONE) != dnnl_success ||
                   (q->has_bias && dnnl_memory_create(&q->b, &bd, c->eng, DNNL_MEMORY_NONE) != dnnl_success) ||
                   (q->post == VT_GEMM_POST_ADD &&
                    dnnl_memory_create(&q->r, &yd, c->eng, DNNL_MEMORY_NONE) != dnnl_success)
               ? -1
               : 0;
}

vt_gemm_prims *vt_gemm_prims_of(vt_gemm_plan *p) {
    vt_gemm_prims *c = p->prims;
    if (c) return c;
    c = calloc(1, sizeof *c);
    if (!c) return NULL;
    p->prims = c;
    if (dnnl_engine_create(&c->eng, dnnl_cpu, 0) != dnnl_success ||
        dnnl_stream_create(&c->stream, c->eng, dnnl_stream_default_flags) != dnnl_success) {
        vt_gemm_plan_free(p);
        return NULL;
    }
    return c;
}

vt_gemm_prim *vt_gemm_linear_prim(vt_gemm_plan *p, int M, int N, int K, int has_bias, vt_gemm_post post) {
    vt_gemm_prims *c = vt_gemm_prims_of(p);
    if (!c) return NULL;
    has_bias = has_bias != 0;
    vt_gemm_prims *bf16 = p->bf16 ? c : NULL;
    for (vt_gemm_prim *q = c->list; q; q = q->next)
        if (q->M == M && q->N == N && q->K == K && q->has_bias == has_bias && q->post == post && q->bf16 == bf16)
            return q;
    vt_gemm_prim *q = calloc(1, sizeof *q);
    if (!q) return NULL;
    *q = (vt_gemm_prim){M, N, K, has_bias, post, NULL, NULL, NULL, NULL, NULL, NULL, c->stream, NULL, bf16};
    if (prim_make(c, q)) {
        prim_free(q);
        return NULL;
    }
    q->next = c->list;
    c->list = q;
    return q;
}

vt_gemm_bfw *vt_gemm_bf16_weight(vt_gemm_plan *p, int N, int K) {
    vt_gemm_prims *c = p->bf16 ? vt_gemm_prims_of(p) : NULL;
    vt_gemm_bfw *q = c ? calloc(1, sizeof *q) : NULL;
    if (!q) return NULL;
    q->bytes = (size_t)N * K * sizeof(uint16_t);
    if (posix_memalign((void **)&q->data, 64, q->bytes)) {
        free(q);
        return NULL;
    }
    q->next = c->bfws;
    c->bfws = q;
    return q;
}

/* A constant weight's bf16 copy (wc) against converting the weight at every run, eval graphs with --dtype bf16
 * (bench/vitc_before_after.py, alternated rounds, 2 threads, AMD EPYC Zen 4, 2026-12-04): batch 1 DeiT-Ti 1.06x,
 * DeiT-S 1.05x, Swin-T 1.05x (5 rounds), batch 16 DeiT-S 1.07x, Swin-T 1.03x (3 rounds); the copies cost half
 * the fp32 weights' memory (DeiT-S's peak resident set 106 -> 143 MiB at batch 1). */
int vt_gemm_prim_run(vt_gemm_prim *q, const float *x, const float *w, const float *b, const float *r, float *y,
                     vt_gemm_bfw *wc, int stale) {
    dnnl_exec_arg_t args[5] = {{DNNL_ARG_SRC, q->x}, {DNNL_ARG_WEIGHTS, q->w}, {DNNL_ARG_DST, q->y}};
    int na = 3;
    const void *xs = x, *ws = w;
    if (q->bf16) {
        uint16_t *xb = vt_gemm_bf_scratch(q->bf16, (size_t)q->M * q->K, wc ? 0 : (size_t)q->N * q->K);
        if (!xb) return -1;
        uint16_t *wb = wc ? wc->data : xb + bf_offset((size_t)q->M * q->K);
        vt_gemm_to_bf16(x, q->M, q->K, q->K, xb);
        if (!wc || stale || wc->wsrc != w) vt_gemm_to_bf16(w, q->N, q->K, q->K, wb);
        if (wc) wc->wsrc = w;
        xs = xb;
        ws = wb;
    }
    if (dnnl_memory_set_data_handle(q->x, (void *)xs) != dnnl_success ||
        dnnl_memory_set_data_handle(q->w, (void *)ws) != dnnl_success ||
        dnnl_memory_set_data_handle(q->y, y) != dnnl_success)
        return -1;
    if (q->has_bias) {
        if (!b || dnnl_memory_set_data_handle(q->b, (void *)b) != dnnl_success) return -1;
        args[na++] = (dnnl_exec_arg_t){DNNL_ARG_BIAS, q->b};
    }
    if (q->post == VT_GEMM_POST_ADD) {
        if (!r || dnnl_memory_set_data_handle(q->r, (void *)r) != dnnl_success) return -1;
        args[na++] = (dnnl_exec_arg_t){DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1, q->r};
    }
    if (dnnl_primitive_execute(q->prim, q->stream, na, args) != dnnl_success ||
        dnnl_stream_wait(q->stream) != dnnl_success)
        return -1;
    if (q->bf16) q->bf16->bf16_runs++; /* outside parallel regions, as the shared bf16 scratch requires */
    return 0;
}

/* For a conv on layouts of its own (NCHW, Winograd): the reorder between the plain layout `plain` and the conv's
 * `conv` layout (x: to it; y: from it) and the memory object in that layout (its data set at run time), or nothing
 * where the two are equal; 0 or -1. */
static int conv_reorder(vt_gemm_prims *c, const dnnl_memory_desc_t *plain, const dnnl_memory_desc_t *conv, int to_conv,
                        dnnl_primitive_t *r, dnnl_memory_t *m, size_t *bytes) {
    if (dnnl_memory_desc_equal(plain, conv)) return 0;
    dnnl_primitive_desc_t rpd = NULL;
    const dnnl_memory_desc_t *from = to_conv ? plain : conv, *to = to_conv ? conv : plain;
    const int bad = dnnl_reorder_primitive_desc_create(&rpd, from, c->eng, to, c->eng, NULL) != dnnl_success ||
                    dnnl_primitive_create(r, rpd) != dnnl_success ||
                    dnnl_memory_create(m, conv, c->eng, DNNL_MEMORY_NONE) != dnnl_success;
    if (rpd) dnnl_primitive_desc_destroy(rpd);
    *bytes = (dnnl_memory_desc_get_size(conv) + 63) / 64 * 64;
    return bad ? -1 : 0;
}

/* The memory descriptors of q's geometry: x and y in the plain layout (xd, yd; split: one group's channels of the
 * whole maps, with their strides) and as the conv takes them (xa, ya: NCHW, or `any`, leaves the layout to oneDNN),
 * the plain weight (wd: goihw, or oihw for one group, or one group's when split) and the weight in the layout oneDNN
 * picks (wany), the conv's output channels (co: a group's when split), and the stride and padding; 0 or -1. */
typedef struct {
    dnnl_memory_desc_t xd, yd, xa, ya, wd, wany;
    dnnl_dims_t st, pad;
    int co;
} conv_descs;

/* A plain (N, C, H, W) map of C channels out of Cf (NCHW or NHWC strides of the Cf-channel map). */
static int plain_md(dnnl_memory_desc_t *m, int B, int C, int H, int W, int Cf, int nchw, dnnl_data_type_t t) {
    dnnl_dims_t dims = {B, C, H, W};
    dnnl_dims_t nhwc = {(int64_t)H * W * Cf, 1, (int64_t)W * Cf, Cf}, nchw_st = {(int64_t)Cf * H * W, H * W, W, 1};
    return dnnl_memory_desc_init_by_strides(m, 4, dims, t, nchw ? nchw_st : nhwc) == dnnl_success ? 0 : -1;
}

static int conv_descs_init(const vt_gemm_conv *q, int any, conv_descs *d) {
    const int *v = q->geom, B = v[0], H = v[2], W = v[3], k = v[5], s = v[6], pad = v[7], nchw = v[10];
    const int Ho = (H + 2 * pad - k) / s + 1, Wo = (W + 2 * pad - k) / s + 1;
    const int G = q->split ? 1 : v[8], C = q->split ? v[1] / v[8] : v[1], Co = q->split ? v[4] / v[8] : v[4];
    const dnnl_format_tag_t taken = nchw || any ? dnnl_format_tag_any : dnnl_nhwc;
    const dnnl_data_type_t dx_t = v[11] == CONV_LINEAR_BF16 ? dnnl_bf16 : dnnl_f32; /* x's and the packed weight's */
    dnnl_dims_t dx = {B, C, H, W}, dy = {B, Co, Ho, Wo};
    dnnl_dims_t dwg = {G, Co / G, C / G, k, k}, dw1 = {Co, C, k, k};
    const int wnd = G > 1 ? 5 : 4;
    int64_t *wdims = G > 1 ? dwg : dw1;
    d->st[0] = d->st[1] = s;
    d->pad[0] = d->pad[1] = pad;
    d->co = Co;
    return plain_md(&d->xd, B, C, H, W, v[1], nchw, dx_t) || plain_md(&d->yd, B, Co, Ho, Wo, v[4], nchw, dnnl_f32) ||
                   dnnl_memory_desc_init_by_tag(&d->xa, 4, dx, dx_t, taken) != dnnl_success ||
                   dnnl_memory_desc_init_by_tag(&d->ya, 4, dy, dnnl_f32, taken) != dnnl_success ||
                   dnnl_memory_desc_init_by_tag(&d->wd, wnd, wdims, dnnl_f32, G > 1 ? dnnl_goihw : dnnl_oihw) !=
                       dnnl_success ||
                   dnnl_memory_desc_init_by_tag(&d->wany, wnd, wdims, dx_t, dnnl_format_tag_any) != dnnl_success
               ? -1
               : 0;
}

#define CONV_WINO_PIXELS 6272 /* output pixels (B·Ho·Wo) from which a conv takes Winograd (conv_wino) */

/* Whether q's geometry may take oneDNN's Winograd kernels (F(4x4, 3x3) or F(2x2, 3x3); at its AVX-512 tier only):
 * a dense 3x3 conv of stride 1 on at least 16 channels in and out and CONV_WINO_PIXELS output pixels, forward (with
 * its dX, the forward conv of dy) or weight gradient, such as Refined-ViT's and Next-ViT's stem convs. On fewer
 * pixels the weight's transform, at every run (a primitive serves every node of its geometry, so its packing is not
 * kept), outweighs the saving: 7x7 maps of 512 channels at batch 1 ran 17x slower, 14x14 of 256 6x, 56x56 of 64
 * level. With the reorders of x and y (dy) to and from the
 * blocked layouts they take, they ran 1.5-2.3x faster than the direct kernels (brgconv, jit) on those stems at batch
 * 1 and 16, 32 to 128 channels at 112x112, forward and weight gradient, with differences of 2e-6 of the output's
 * scale (AMD EPYC Zen 4, 2 threads, 2026-12-05; docs/benchmarks.md, "Winograd"). Grouped convs have no such kernel:
 * with at least 16 channels per group in and out they run as one dense Winograd conv per group (`split`), each
 * group's channels reordered from and to the whole maps: Next-ViT's 32-channel MHCA groups 1.36-1.74x the grouped
 * direct conv from 2 x 56x56 and 8 x 28x28 output pixels, 0.36-1.28x on fewer. */
static int conv_wino(const vt_gemm_conv *q) {
    const int *v = q->geom, G = v[8], px = v[0] * (v[2] + 2 * v[7] - 2) * (v[3] + 2 * v[7] - 2); /* B·Ho·Wo */
    if (v[11] > CONV_WGRAD || v[5] != 3 || v[6] != 1 || v[1] / G < 16 || v[4] / G < 16 || px < CONV_WINO_PIXELS)
        return 0;
    return G == 1 || !(v[9] & (VT_CONV_ADD | VT_CONV_GELU));
}

/* q's forward primitive descriptor with algorithm alg (x and y in the layouts conv_descs_init gave d), its post-ops
 * as q's flags say; NULL where oneDNN has no kernel for it or only a reference one. */
static dnnl_primitive_desc_t conv_fwd_pd(vt_gemm_prims *c, const vt_gemm_conv *q, dnnl_alg_kind_t alg,
                                         const conv_descs *d) {
    const int *v = q->geom, nchw = v[10];
    dnnl_memory_desc_t bd;
    const dnnl_dims_t db = {d->co};
    dnnl_convolution_desc_t cd;
    if (dnnl_memory_desc_init_by_tag(&bd, 1, db, dnnl_f32, dnnl_a) != dnnl_success ||
        dnnl_convolution_forward_desc_init(&cd, dnnl_forward_inference, alg, &d->xa, &d->wany,
                                           (v[9] & VT_CONV_BIAS) ? &bd : NULL, &d->ya, d->st, d->pad, d->pad) !=
            dnnl_success)
        return NULL;
    dnnl_primitive_desc_t pd = NULL;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t po = NULL;
    const int acts = (v[9] & VT_CONV_RELU ? 1 : 0) + (v[9] & VT_CONV_GELU ? 1 : 0) + (v[9] & VT_CONV_ADD ? 1 : 0);
    if (acts > 1 || (nchw && (v[9] & (VT_CONV_ADD | VT_CONV_GELU)))) return NULL; /* not needed: not made */
    const vt_gemm_post post = (v[9] & VT_CONV_RELU)   ? VT_GEMM_POST_RELU
                              : (v[9] & VT_CONV_GELU) ? VT_GEMM_POST_GELU
                              : (v[9] & VT_CONV_ADD)  ? VT_GEMM_POST_ADD
                                                      : VT_GEMM_POST_NONE;
    int made = post != VT_GEMM_POST_NONE ? dnnl_primitive_attr_create(&attr) == dnnl_success &&
                                               dnnl_post_ops_create(&po) == dnnl_success &&
                                               append_post(po, post, &d->yd) == 0 &&
                                               dnnl_primitive_attr_set_post_ops(attr, po) == dnnl_success
                                         : 1;
    made = made && dnnl_primitive_desc_create(&pd, &cd, attr, c->eng, NULL) == dnnl_success;
    if (po) dnnl_post_ops_destroy(po);
    if (attr) dnnl_primitive_attr_destroy(attr);
    const char *impl = "";
    if (made) dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl);
    if (made && !strstr(impl, "ref") && (v[11] < CONV_LINEAR || strstr(impl, "1x1"))) return pd;
    if (pd) dnnl_primitive_desc_destroy(pd);
    return NULL;
}

/* A primitive descriptor maker of q on d's descriptors with algorithm alg: conv_fwd_pd or convw_pd. */
typedef dnnl_primitive_desc_t (*conv_pd_fn)(vt_gemm_prims *, const vt_gemm_conv *, dnnl_alg_kind_t, const conv_descs *);

/* q's primitive descriptor from make: Winograd where conv_wino allows it (a grouped conv then split), else the direct
 * algorithm; d gets the descriptors it was made on, q->impl oneDNN's kernel name; NULL where neither exists. */
static dnnl_primitive_desc_t conv_pick(vt_gemm_prims *c, vt_gemm_conv *q, conv_pd_fn make, conv_descs *d) {
    dnnl_primitive_desc_t pd = NULL;
    q->split = conv_wino(q) && q->geom[8] > 1;
    if (conv_wino(q) && conv_descs_init(q, 1, d) == 0) pd = make(c, q, dnnl_convolution_winograd, d);
    if (!pd && (q->split = 0, conv_descs_init(q, 0, d)) == 0) pd = make(c, q, dnnl_convolution_direct, d);
    const char *impl = "";
    if (pd) dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl);
    snprintf(q->impl, sizeof q->impl, "%s", impl);
    return pd;
}

/* Makes q's convolution (weights in the layout oneDNN picks; NCHW, and Winograd's geometries (conv_wino): x and y
 * too, with their reorders), the weight reorder and the memory objects; 0 or -1. A reference kernel is refused: it
 * is slower than im2col + sgemm. */
static int conv_make(vt_gemm_prims *c, vt_gemm_conv *q) {
    const int *v = q->geom;
    conv_descs d;
    dnnl_memory_desc_t bd;
    dnnl_primitive_desc_t pd = conv_pick(c, q, conv_fwd_pd, &d), rpd = NULL;
    const dnnl_dims_t db = {pd ? d.co : 1};
    if (!pd || dnnl_memory_desc_init_by_tag(&bd, 1, db, dnnl_f32, dnnl_a) != dnnl_success) {
        if (pd) dnnl_primitive_desc_destroy(pd);
        return -1;
    }
    const dnnl_memory_desc_t *wq = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
    q->wstep = wq ? (dnnl_memory_desc_get_size(wq) + 63) / 64 * 64 : 0;
    q->wbytes = wq ? dnnl_memory_desc_get_size(wq) + q->wstep * (size_t)(q->split ? v[8] - 1 : 0) : 0;
    int bad = !wq || !(q->packed = aligned_alloc(64, (q->wbytes + 63) / 64 * 64 + 64));
    if (!bad) bad = dnnl_primitive_create(&q->prim, pd) != dnnl_success ||
                    dnnl_reorder_primitive_desc_create(&rpd, &d.wd, c->eng, wq, c->eng, NULL) != dnnl_success ||
                    dnnl_primitive_create(&q->pack, rpd) != dnnl_success ||
                    dnnl_memory_create(&q->wp, wq, c->eng, q->packed) != dnnl_success ||
                    dnnl_memory_create(&q->w, &d.wd, c->eng, DNNL_MEMORY_NONE) != dnnl_success ||
                    dnnl_memory_create(&q->x, &d.xd, c->eng, DNNL_MEMORY_NONE) != dnnl_success ||
                    dnnl_memory_create(&q->y, &d.yd, c->eng, DNNL_MEMORY_NONE) != dnnl_success ||
                    ((v[9] & VT_CONV_BIAS) && mem_of(&q->b, &bd, c->eng)) ||
                    ((v[9] & VT_CONV_ADD) && mem_of(&q->r, &d.yd, c->eng));
    if (!bad) /* nothing where the conv takes the plain layouts */
        bad = conv_reorder(c, &d.xd, dnnl_primitive_desc_query_md(pd, dnnl_query_src_md, 0), 1, &q->rx, &q->xb,
                           &q->xb_bytes) ||
              conv_reorder(c, &d.yd, dnnl_primitive_desc_query_md(pd, dnnl_query_dst_md, 0), 0, &q->ry, &q->yb,
                           &q->yb_bytes);
    if (rpd) dnnl_primitive_desc_destroy(rpd);
    dnnl_primitive_desc_destroy(pd);
    return bad ? -1 : 0;
}

/* q's weight-gradient primitive descriptor with algorithm alg (x and dy in the layouts conv_descs_init gave d);
 * NULL where oneDNN has no kernel for it or only a reference one. */
static dnnl_primitive_desc_t convw_pd(vt_gemm_prims *c, const vt_gemm_conv *q, dnnl_alg_kind_t alg,
                                      const conv_descs *d) {
    (void)q; /* conv_pick's signature */
    dnnl_convolution_desc_t fd, bd;
    dnnl_primitive_desc_t fpd = NULL, pd = NULL;
    const char *impl = "";
    const int made =
        dnnl_convolution_forward_desc_init(&fd, dnnl_forward_training, alg, &d->xa, &d->wany, NULL, &d->ya, d->st,
                                           d->pad, d->pad) == dnnl_success &&
        dnnl_primitive_desc_create(&fpd, &fd, NULL, c->eng, NULL) == dnnl_success &&
        dnnl_convolution_backward_weights_desc_init(&bd, alg, &d->xa, &d->wany, NULL, &d->ya, d->st, d->pad,
                                                    d->pad) == dnnl_success &&
        dnnl_primitive_desc_create(&pd, &bd, NULL, c->eng, fpd) == dnnl_success;
    if (fpd) dnnl_primitive_desc_destroy(fpd);
    if (made) dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl);
    if (made && !strstr(impl, "ref")) return pd;
    if (pd) dnnl_primitive_desc_destroy(pd);
    return NULL;
}

/* Makes q's weight-gradient convolution (channels-last x and dy as they are, or NCHW ones and Winograd's
 * (conv_wino) reordered into the blocked layouts it picks; the gradient in the layout it picks, added into the plain
 * (Cout, C/G, k, k) one by a reorder with a sum post-op); 0 or -1. A reference kernel is refused. */
static int convw_make(vt_gemm_prims *c, vt_gemm_conv *q) {
    conv_descs d;
    dnnl_primitive_desc_t pd = conv_pick(c, q, convw_pd, &d), rpd = NULL;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t po = NULL;
    const dnnl_memory_desc_t *wq = pd ? dnnl_primitive_desc_query_md(pd, dnnl_query_diff_weights_md, 0) : NULL;
    q->wstep = wq ? (dnnl_memory_desc_get_size(wq) + 63) / 64 * 64 : 0; /* one group's gradient when split */
    const size_t wbytes = q->wstep * (size_t)(q->split ? q->geom[8] : 1);
    int bad = !wq || !(q->packed = aligned_alloc(64, wbytes + 64));
    if (!bad)
        bad = dnnl_primitive_create(&q->prim, pd) != dnnl_success ||
              dnnl_primitive_attr_create(&attr) != dnnl_success || dnnl_post_ops_create(&po) != dnnl_success ||
              dnnl_post_ops_append_sum(po, 1.0f) != dnnl_success ||
              dnnl_primitive_attr_set_post_ops(attr, po) != dnnl_success ||
              dnnl_reorder_primitive_desc_create(&rpd, wq, c->eng, &d.wd, c->eng, attr) != dnnl_success ||
              dnnl_primitive_create(&q->pack, rpd) != dnnl_success ||
              dnnl_memory_create(&q->wp, wq, c->eng, q->packed) != dnnl_success ||
              dnnl_memory_create(&q->w, &d.wd, c->eng, DNNL_MEMORY_NONE) != dnnl_success ||
              dnnl_memory_create(&q->x, &d.xd, c->eng, DNNL_MEMORY_NONE) != dnnl_success ||
              dnnl_memory_create(&q->y, &d.yd, c->eng, DNNL_MEMORY_NONE) != dnnl_success;
    if (!bad) /* nothing where the conv takes the plain layouts */
        bad = conv_reorder(c, &d.xd, dnnl_primitive_desc_query_md(pd, dnnl_query_src_md, 0), 1, &q->rx, &q->xb,
                           &q->xb_bytes) ||
              conv_reorder(c, &d.yd, dnnl_primitive_desc_query_md(pd, dnnl_query_diff_dst_md, 0), 1, &q->ry, &q->yb,
                           &q->yb_bytes);
    if (po) dnnl_post_ops_destroy(po);
    if (attr) dnnl_primitive_attr_destroy(attr);
    if (rpd) dnnl_primitive_desc_destroy(rpd);
    if (pd) dnnl_primitive_desc_destroy(pd);
    return bad ? -1 : 0;
}

/* The plan's convolution for geom (forward, or the weight gradient when geom[11]), made on first request. */
static vt_gemm_conv *conv_get(vt_gemm_plan *p, const int geom[12]) {
    if (p->force == VT_GEMM_OPENBLAS ||
        (p->force == VT_GEMM_AUTO && (p->openblas > p->onednn || p->onednn < VT_ISA_AVX2)))
        return NULL;
    vt_gemm_prims *c = vt_gemm_prims_of(p);
    if (!c) return NULL;
    for (vt_gemm_conv *q = c->convs; q; q = q->next)
        if (geom[11] < CONV_LINEAR && memcmp(q->geom, geom, sizeof q->geom) == 0) return q;
    vt_gemm_conv *q = calloc(1, sizeof *q);
    if (!q) return NULL;
    memcpy(q->geom, geom, sizeof q->geom);
    q->stream = c->stream;
    if (geom[11] == CONV_WGRAD ? convw_make(c, q) : conv_make(c, q)) {
        conv_free(q);
        return NULL;
    }
    q->next = c->convs;
    c->convs = q;
    return q;
}

vt_gemm_conv *vt_gemm_conv_prim(vt_gemm_plan *p, int B, int C, int H, int W, int Cout, int k, int s, int pad, int G,
                                int flags, int nchw) {
    /* oneDNN 2.6.3's depthwise convolution adds a binary post-op's term wrongly where the output is one pixel (B = 1,
     * 1x1 map: the term's dims (1, C, 1, 1) read as a per-channel broadcast): off by up to 2.0 at C = 50 and 64 (right
     * at 3 and 16; dense convs right), found in GroupMixFormer's stage 4 at 32 px (CPE) at batch 1, 2026-12-01.
     * Grouped convs with an added term and one output pixel stay on the reference kernels. */
    if (G > 1 && (flags & VT_CONV_ADD) && B * ((H + 2 * pad - k) / s + 1) * ((W + 2 * pad - k) / s + 1) == 1)
        return NULL;
    const int kept = flags & (VT_CONV_BIAS | VT_CONV_RELU | VT_CONV_ADD | VT_CONV_GELU);
    const int geom[12] = {B, C, H, W, Cout, k, s, pad, G, kept, nchw != 0, CONV_FWD};
    return conv_get(p, geom);
}

/* Measured faster than im2col + sgemm at the AVX-512 tier only (conv.c); with oneDNN's AVX2 kernels (AMD EPYC Zen 3,
 * 2026-11-27) it ran Next-ViT-S's stem conv at 73 GFLOP/s, no faster. */
vt_gemm_conv *vt_gemm_conv_wgrad(vt_gemm_plan *p, int B, int C, int H, int W, int Cout, int k, int s, int pad, int G,
                                 int nchw) {
    if (p->force == VT_GEMM_AUTO && p->onednn < VT_ISA_AVX512) return NULL;
    const int geom[12] = {B, C, H, W, Cout, k, s, pad, G, 0, nchw != 0, CONV_WGRAD};
    return conv_get(p, geom);
}

/* Floats between two groups' channels of x, of y (dy), of the plain weight and of the bias when q is split, else 0
 * (q's one group is all of them). */
typedef struct {
    size_t x, y, w, b;
} conv_steps;

static conv_steps conv_group_steps(const vt_gemm_conv *q) {
    const int *v = q->geom, G = v[8], nchw = v[10];
    if (!q->split) return (conv_steps){0, 0, 0, 0};
    const size_t cg = (size_t)(v[1] / G), og = (size_t)(v[4] / G), kk = (size_t)v[5] * v[5];
    const size_t hw = (size_t)v[2] * v[3], ohw = (size_t)((v[2] + 2 * v[7] - v[5]) / v[6] + 1) *
                                                (size_t)((v[3] + 2 * v[7] - v[5]) / v[6] + 1);
    return (conv_steps){nchw ? cg * hw : cg, nchw ? og * ohw : og, og * cg * kk, og};
}

/* Points memory m at p; 0 or -1. */
static int at(dnnl_memory_t m, const void *p) {
    return dnnl_memory_set_data_handle(m, (void *)p) == dnnl_success ? 0 : -1;
}

/* The blocked x and y (dy) of q in scratch (conv_reorder's, where q has them); 0, or -1 where q needs scratch and
 * has none. */
static int conv_scratch_at(vt_gemm_conv *q, unsigned char *sc) {
    if ((q->xb || q->yb) && !sc) return -1;
    return (q->xb && at(q->xb, sc)) || (q->yb && at(q->yb, sc + q->xb_bytes)) ? -1 : 0;
}

int vt_gemm_conv_wgrad_run(vt_gemm_conv *q, const float *x, const float *dy, float *dw, void *scratch) {
    if (conv_scratch_at(q, scratch)) return -1;
    dnnl_memory_t cx = q->xb ? q->xb : q->x, cy = q->yb ? q->yb : q->y;
    dnnl_exec_arg_t xa[2] = {{DNNL_ARG_FROM, q->x}, {DNNL_ARG_TO, cx}};
    dnnl_exec_arg_t ya[2] = {{DNNL_ARG_FROM, q->y}, {DNNL_ARG_TO, cy}};
    dnnl_exec_arg_t ca[3] = {{DNNL_ARG_SRC, cx}, {DNNL_ARG_DIFF_DST, cy}, {DNNL_ARG_DIFF_WEIGHTS, q->wp}};
    dnnl_exec_arg_t ra[2] = {{DNNL_ARG_FROM, q->wp}, {DNNL_ARG_TO, q->w}};
    const conv_steps st = conv_group_steps(q);
    const int ng = q->split ? q->geom[8] : 1;
    unsigned char *packed = q->packed;
    int bad = 0;
    for (int g = 0; g < ng && !bad; g++) /* every group's gradient first (a split conv's one at a time): dw untouched */
        bad = at(q->x, x + g * st.x) || at(q->y, dy + g * st.y) || at(q->wp, packed + g * q->wstep) ||
              (q->rx && dnnl_primitive_execute(q->rx, q->stream, 2, xa) != dnnl_success) ||
              (q->ry && dnnl_primitive_execute(q->ry, q->stream, 2, ya) != dnnl_success) ||
              dnnl_primitive_execute(q->prim, q->stream, 3, ca) != dnnl_success;
    for (int g = 0; g < ng && !bad; g++) /* then the adds into dw */
        bad = at(q->wp, packed + g * q->wstep) || at(q->w, dw + g * st.w) ||
              dnnl_primitive_execute(q->pack, q->stream, 2, ra) != dnnl_success;
    return bad || dnnl_stream_wait(q->stream) != dnnl_success ? -1 : 0;
}

size_t vt_gemm_conv_scratch(const vt_gemm_conv *q) { return q->xb_bytes + q->yb_bytes; }

const char *vt_gemm_conv_impl(const vt_gemm_conv *q) { return q->impl; }

/* Rule 12 (see the list at vt_gemm_choose, gemm.c). */
vt_gemm_conv *vt_gemm_linear_conv(vt_gemm_plan *p, int M, int N, int K, int has_bias, vt_gemm_post post) {
    if (!vt_gemm_linear_packs(p) || post == VT_GEMM_POST_GELU) return NULL;
    const int flags = (has_bias ? VT_CONV_BIAS : 0) | (post == VT_GEMM_POST_RELU ? VT_CONV_RELU : 0) |
                      (post == VT_GEMM_POST_ADD ? VT_CONV_ADD : 0);
    const int bf = p->bf16 && (int64_t)M * N * K >= VT_GEMM_BF16_MNK; /* a bf16 plan's product of that size */
    const int geom[12] = {1, K, 1, M, N, 1, 1, 0, 1, flags, 0, bf ? CONV_LINEAR_BF16 : CONV_LINEAR};
    vt_gemm_conv *q = conv_get(p, geom);
    if (q && bf) q->bf16 = p->prims;
    return q;
}

int vt_gemm_linear_conv_run(vt_gemm_conv *q, const float *x, const float *w, const float *b, const float *r,
                            float *y, int repack) {
    const int pack = repack || q->wsrc != w, M = q->geom[3], K = q->geom[1];
    const void *xs = x;
    if (q->bf16) { /* x in bf16 (the packing reorder converts the weight) */
        uint16_t *xb = vt_gemm_bf_scratch(q->bf16, (size_t)M * K, 0);
        if (!xb) return -1;
        vt_gemm_to_bf16(x, M, K, K, xb);
        xs = xb;
    }
    q->wsrc = NULL;
    if (vt_gemm_conv_run_add(q, xs, w, b, r, y, NULL, pack)) return -1;
    q->wsrc = w;
    if (q->bf16) q->bf16->bf16_runs++; /* outside parallel regions, as the shared bf16 scratch requires */
    return 0;
}

int vt_gemm_conv_run(vt_gemm_conv *q, const float *x, const float *w, const float *b, float *y, void *scratch,
                     int pack) {
    return vt_gemm_conv_run_add(q, x, w, b, NULL, y, scratch, pack);
}

int vt_gemm_conv_run_add(vt_gemm_conv *q, const float *x, const float *w, const float *b, const float *r, float *y,
                         void *scratch, int pack) {
    if (!q->r != !r || conv_scratch_at(q, scratch)) return -1;
    dnnl_memory_t cx = q->xb ? q->xb : q->x, cy = q->yb ? q->yb : q->y;
    dnnl_exec_arg_t pa[2] = {{DNNL_ARG_FROM, q->w}, {DNNL_ARG_TO, q->wp}};
    dnnl_exec_arg_t xa[2] = {{DNNL_ARG_FROM, q->x}, {DNNL_ARG_TO, cx}};
    dnnl_exec_arg_t ya[2] = {{DNNL_ARG_FROM, cy}, {DNNL_ARG_TO, q->y}};
    dnnl_exec_arg_t ca[5] = {{DNNL_ARG_SRC, cx}, {DNNL_ARG_WEIGHTS, q->wp}, {DNNL_ARG_DST, cy}};
    int na = 3;
    if (q->b) ca[na++] = (dnnl_exec_arg_t){DNNL_ARG_BIAS, q->b};
    if (q->r) ca[na++] = (dnnl_exec_arg_t){DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1, q->r};
    const conv_steps st = conv_group_steps(q);
    unsigned char *packed = q->packed;
    int bad = 0;
    for (int g = 0; g < (q->split ? q->geom[8] : 1) && !bad; g++) /* a split conv's groups one at a time */
        bad = (r && at(q->r, r + g * st.y)) || at(q->w, w + g * st.w) || at(q->wp, packed + g * q->wstep) ||
              at(q->x, x + g * st.x) || at(q->y, y + g * st.y) || (q->b && at(q->b, b + g * st.b)) ||
              (pack && dnnl_primitive_execute(q->pack, q->stream, 2, pa) != dnnl_success) ||
              (q->rx && dnnl_primitive_execute(q->rx, q->stream, 2, xa) != dnnl_success) ||
              dnnl_primitive_execute(q->prim, q->stream, na, ca) != dnnl_success ||
              (q->ry && dnnl_primitive_execute(q->ry, q->stream, 2, ya) != dnnl_success);
    return bad || dnnl_stream_wait(q->stream) != dnnl_success ? -1 : 0;
}
