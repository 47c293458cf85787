/* The embedding API (include/vitc/api.h) over the library: the registry and vt_model_configure for the model,
 * vt_model_load for the weights, vt_predictor (src/infer/predict.c) for every forward pass, the image decoders and
 * eval preprocessing of src/io. Each call runs with the model's thread count and restores the caller's OpenMP thread
 * setting and floating-point mode (the graphs flush subnormals to zero) on return. */
#include <math.h>
#include <omp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#if defined(__SSE2__)
#include <immintrin.h>
#endif

#include "vitc/api.h"
#include "vitc/imagefolder.h"
#include "vitc/predict.h"
#include "vitc/weights.h"

/* the public limits are the engine's: a caller's maps[VITC_MAX_STAGES] and top-k arrays take what it writes */
_Static_assert(VITC_MAX_STAGES == VT_MAX_STAGES && VITC_MAX_TOPK == VT_MAX_TOPK, "api.h's limits differ");

struct vitc_model {
    vt_model_cfg cfg; /* configured at open (image size, crop_pct); never written after: calls read it unclaimed */
    int int8, bf16;   /* the linear layers' arithmetic vitc_set_dtype chose (read and written only while claimed) */
    vt_params *P;
    int threads;      /* 0: the caller's OpenMP setting */
    int batch;        /* most images per forward pass */
    int64_t params;
    double gmacs;
    vt_predictor pred; /* the last graph built, reused while (batch, size, what, threads) stay the same */
    int pred_what;
    vt_dtype_use last; /* the linear layers of the last call that ran the graph */
    char **classes;    /* the class names of classes.json beside the weights when it names every class, else NULL */
    atomic_int busy;   /* 1 while a call runs: a second thread's call is refused, not run on the same buffers */
};

#define STR2(x) #x
#define STR(x) STR2(x)

const char *vitc_version(void) {
    return STR(VITC_VERSION_MAJOR) "." STR(VITC_VERSION_MINOR) "." STR(VITC_VERSION_PATCH);
}

int vitc_model_count(void) { return vt_model_count(); }

const char *vitc_model_name(int i) { return i >= 0 && i < vt_model_count() ? vt_model_at(i)->name : NULL; }

void vitc_options_init(vitc_options *opt) {
    if (opt) memset(opt, 0, sizeof *opt);
}

/* Formats into msg (n bytes) as vt_msg_vformat: a message longer than the caller's buffer keeps its start and its
 * end (the reason after a long path); returns -1. */
static int format_into(char *msg, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int format_into(char *msg, size_t n, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vt_msg_vformat(msg, n, fmt, ap);
    va_end(ap);
    return -1;
}

/* Sets err's message and code (VITC_E_*) when err is non-NULL; returns -1. */
static int fail(vitc_error *err, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(vitc_error *err, int code, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vt_msg_vformat(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
        err->code = code;
    }
    return -1;
}

/* The VITC_E_* of an internal error: its own kind where it has one (a usage error, the system's refusal of a file,
 * out of memory, a non-finite result), else `otherwise` (what failing at that step means: VITC_E_WEIGHTS while
 * loading weights, VITC_E_IMAGE for an image that failed, ...). */
static int code_of(const vt_err *e, int otherwise) {
    switch (e->code) {
    case VT_E_USAGE: return VITC_E_ARGUMENT;
    case VT_E_IO: return VITC_E_FILE;
    case VT_E_NOMEM: return VITC_E_MEMORY;
    case VT_E_NONFINITE: return VITC_E_FAILED;
    default: return otherwise;
    }
}

/* Whether options ov alone configure model base (and, with graph, build its graph): when the caller's do and the
 * record's (those a weights file records) do not, an error with both is the file's; when both do, the caller's. */
static int builds(const vt_model_cfg *base, const vt_model_overrides *ov, int graph) {
    vt_model_cfg c;
    vt_model_summary s = {0};
    vt_err e = {0};
    if (vt_model_configure(base, ov, &c, &e)) return 0;
    if (!graph) return 1;
    const int ok = vt_model_summarize(&c, &s, &e) == 0;
    vt_model_summary_free(&s);
    return ok;
}

/* Rewrites error e, met with the options weights file `weights` records (`recorded`), as the file's; its step's code,
 * VITC_E_WEIGHTS. */
static int blame_record(vt_err *e, const char *weights, const char *recorded) {
    const vt_err re = *e;
    vt_clearerr(e); /* code VT_E_FAILED: the step's code, not VT_E_USAGE's "argument" */
    vt_seterr(e, "%s: its %s record (\"%s\"): %s", weights, VT_OPTIONS_KEY, recorded, re.msg);
    return VITC_E_WEIGHTS;
}

/* Clears err (no message, VITC_OK) at the start of a call. */
static void clear(vitc_error *err) {
    if (err) {
        err->msg[0] = '\0';
        err->code = VITC_OK;
    }
}

/* The caller's thread setting and floating-point mode, saved on entry to a call and restored on return. */
typedef struct {
    int threads;
    unsigned csr;
} call_env;

/* Claims m for this thread's call: -1 with the reason when another thread's call holds it (release: m->busy = 0). */
static int claim(vitc_model *m, vt_err *e) {
    if (!atomic_exchange(&m->busy, 1)) return 0;
    return vt_seterr(e, "%s: the model is in use by another thread's call (a vitc_model runs one call at a time: "
                     "open one per thread)", m->cfg.name);
}

/* The caller's floating-point mode, then round-to-nearest in this thread: the images' preprocessing (decoding,
 * resizing, normalising) runs here before any graph sets it (FE_UPWARD had moved the first batch's pixels). */
static unsigned fp_nearest(void) {
#if defined(__SSE2__)
    const unsigned csr = _mm_getcsr();
    _mm_setcsr(csr & ~0x6000u); /* rounding control, bits 13-14: nearest */
    return csr;
#else
    return 0;
#endif
}

/* Claims m for this call (claim) and saves the caller's settings. */
static int enter(vitc_model *m, call_env *c, vt_err *e) {
    if (claim(m, e)) return -1;
    c->threads = omp_get_max_threads();
    if (m->threads > 0) omp_set_num_threads(m->threads);
    c->csr = fp_nearest();
    return 0;
}

/* The graphs set flush-to-zero in the OpenMP threads they run on (m's graph's count), where it persists: the
 * caller's own parallel code would flush subnormals in every thread but its first. Each gets the caller's mode back.
 * Releases m. */
static void leave(vitc_model *m, const call_env *c) {
    omp_set_num_threads(c->threads);
#if defined(__SSE2__)
    const unsigned csr = c->csr;
    const int team = m->pred.g && m->pred.g->threads > c->threads ? m->pred.g->threads : c->threads;
    const int dynamic = omp_get_dynamic(); /* a dynamic team could leave some of those threads out */
    omp_set_dynamic(0);
#pragma omp parallel num_threads(team)
    _mm_setcsr(csr);
    omp_set_dynamic(dynamic);
    _mm_setcsr(csr);
#endif
    atomic_store(&m->busy, 0);
}

/* Fills the options ov keeps (not given) with those the weights' record rec sets, for a model of `stages` stages. */
static void take_recorded(vt_model_overrides *ov, const vt_model_overrides *rec, int stages) {
    if (ov->img_size <= 0) {
        ov->img_size = rec->img_size;
        ov->img_w = rec->img_w;
    }
    if (ov->in_chans <= 0) ov->in_chans = rec->in_chans;
    if (ov->num_classes <= 0) ov->num_classes = rec->num_classes;
    if (!ov->attn) ov->attn = rec->attn;
    if (!ov->ffn) ov->ffn = rec->ffn;
    const size_t bytes = sizeof(int) * (size_t)stages;
    if (ov->dims[0] <= 0) memcpy(ov->dims, rec->dims, bytes);
    if (ov->depths[0] <= 0) memcpy(ov->depths, rec->depths, bytes);
    if (ov->heads[0] <= 0) memcpy(ov->heads, rec->heads, bytes);
    if (ov->windows[0] <= 0) {
        memcpy(ov->windows, rec->windows, bytes);
        ov->windows_listed = rec->windows_listed;
    }
    ov->apply_transform |= rec->apply_transform;
    ov->double_heads |= rec->double_heads;
}

vitc_model *vitc_open(const char *name, const char *weights, const vitc_options *opt, vitc_error *err) {
    return vitc_open_with(name, weights, opt, NULL, err);
}

vitc_model *vitc_open_with(const char *name, const char *weights, const vitc_options *opt, const char *model_options,
                           vitc_error *err) {
    vitc_options o;
    vitc_options_init(&o);
    if (opt) o = *opt;
    clear(err);
    const int A = VITC_E_ARGUMENT;
    if (!name || !*name) return fail(err, A, "vitc_open: no model name"), NULL;
    const vt_model_cfg *base = vt_model_find(name);
    char hint[128];
    if (!base)
        return fail(err, VITC_E_MODEL, "unknown model '%s' (%ssee vitc_model_name or `vitc list`)", name,
                    vt_model_hint(name, hint, sizeof hint)), NULL;
    if (!weights || !*weights) return fail(err, A, "vitc_open: no weights file for %s", name), NULL;
    if (o.threads < 0 || o.threads > 1024) return fail(err, A, "threads %d is outside [0, 1024]", o.threads), NULL;
    if (o.img_size < 0 || o.img_size > 4096) return fail(err, A, "img_size %d is outside [0, 4096]", o.img_size), NULL;
    if (o.batch < 0 || o.batch > 1024) return fail(err, A, "batch %d is outside [0, 1024]", o.batch), NULL;
    if (!(o.crop_pct >= 0.0f && o.crop_pct <= 10.0f))
        return fail(err, A, "crop_pct %g is outside [0, 10]", (double)o.crop_pct), NULL;
    vitc_model *m = calloc(1, sizeof *m);
    if (!m) return fail(err, VITC_E_MEMORY, "out of memory"), NULL;
    atomic_init(&m->busy, 0);
    const int cores = vt_cpus_usable();
    m->threads = o.threads > cores ? cores : o.threads;
    m->batch = o.batch > 0 ? o.batch : 16;
    vt_model_overrides ov = vt_model_no_overrides(), rec = vt_model_no_overrides();
    vt_err e = {0};
    char names[256], rnames[256]; /* --attn, --ffn and --dtype values */
    ov.recorded = 1; /* what `vitc train` records: heads a GMA stage ignored stay ignored */
    if (vt_model_parse_options(model_options, base->arch.nstages, &ov, names, sizeof names, 0, &e)) {
        free(m);
        return fail(err, code_of(&e, A), "%s: %s", name, e.msg), NULL;
    }
    if (ov.dtype && strcmp(ov.dtype, "fp32") && strcmp(ov.dtype, "bf16") && strcmp(ov.dtype, "int8")) {
        free(m);
        return fail(err, A, "%s: unknown --dtype '%s' (fp32, bf16 or int8)", name, ov.dtype), NULL;
    }
    ov.dtype = NULL; /* the arithmetic is vitc_set_dtype's: a run's recorded --dtype does not bind its weights */
    if (o.img_size && ov.img_size && (o.img_size != ov.img_size || (ov.img_w && ov.img_w != ov.img_size))) {
        free(m);
        return fail(err, A, "%s: img_size %d (vitc_options) and --img-size %d%s%.0d (model options) differ", name,
                    o.img_size, ov.img_size, ov.img_w ? "x" : "", ov.img_w), NULL;
    }
    vt_st_file f; /* read once: the options it records, then its values */
    if (vt_st_open(weights, &f, &e)) {
        free(m);
        return fail(err, code_of(&e, VITC_E_WEIGHTS), "%s", e.msg), NULL;
    }
    const char *rmodel = vt_st_meta(&f, VT_MODEL_KEY), *roptions = vt_st_meta(&f, VT_OPTIONS_KEY);
    if (rmodel && vt_model_find(rmodel) == base && roptions &&
        vt_model_parse_options(roptions, base->arch.nstages, &rec, rnames, sizeof rnames, 1, &e)) {
        vt_st_close(&f);
        free(m);
        return fail(err, e.code == VT_E_NOMEM ? VITC_E_MEMORY : VITC_E_WEIGHTS, "%s: its %s record: %s", weights,
                    VT_OPTIONS_KEY, e.msg), NULL;
    }
    /* vitc records only architecture and size options there (cfg.options, as vt_model_configure writes them), as the
     * CLI's reader requires */
    const char *runtime = rec.no_prepack   ? "--no-prepack"
                          : rec.train_form ? "--train-form"
                          : rec.dtype      ? "--dtype"
                                           : NULL;
    if (runtime) {
        vt_st_close(&f);
        free(m);
        return fail(err, VITC_E_WEIGHTS, "%s records the model option '%s' (%s): not a file vitc wrote", weights,
                    runtime, VT_OPTIONS_KEY), NULL;
    }
    if (o.img_size) rec.img_size = 0; /* opt's size, where the weights fit it */
    vt_model_overrides given = ov;                /* the caller's alone: whom a configuration error blames */
    take_recorded(&ov, &rec, base->arch.nstages); /* the options given, then those the weights record */
    if (o.img_size) {
        ov.img_size = given.img_size = o.img_size;
        ov.img_w = given.img_w = 0;
    }
    ov.crop_pct = given.crop_pct = o.crop_pct;
    vt_model_summary s = {0};
    call_env env = {0, 0};
    enter(m, &env, &e); /* m is this thread's alone yet */
    int step = A; /* what a failure means at each step: the options, the model's graph, the weights */
    const int configured = vt_model_configure(base, &ov, &m->cfg, &e) == 0;
    const int recorded = rmodel && vt_model_find(rmodel) == base && roptions && roptions[0];
    rec.recorded = 1;
    if (!configured && recorded && e.code != VT_E_NOMEM && builds(base, &given, 0) && !builds(base, &rec, 0))
        step = blame_record(&e, weights, roptions);
    if (configured && vt_model_file_in_training_form(&m->cfg, &f))
        m->cfg.arch.train_form = 1; /* the form the file holds */
    if (configured) step = VITC_E_FAILED;
    if (configured && vt_model_summarize(&m->cfg, &s, &e) == 0) {
        m->params = s.params;
        m->gmacs = (double)s.macs / 1e9;
        step = VITC_E_WEIGHTS;
        m->P = vt_model_load_file(&m->cfg, &f, weights, &e);
    } /* a graph the recorded options make too large or inconsistent (--heads 3 on width 64) */
    if (configured && !m->P && recorded && e.code == VT_E_USAGE && builds(base, &given, 1) && !builds(base, &rec, 1))
        step = blame_record(&e, weights, roptions);
    vt_st_close(&f);
    vt_model_summary_free(&s);
    leave(m, &env);
    if (!m->P) {
        fail(err, code_of(&e, step), "%s", e.msg);
        free(m);
        return NULL;
    }
    char path[4096];
    vt_err ce = {0}; /* a classes.json that is not used leaves the dataset's names (or none) */
    if (vt_classes_beside(weights, m->cfg.arch.num_classes, &m->classes, path, sizeof path, &ce) <= 0)
        m->classes = NULL;
    return m;
}

int vitc_set_dtype(vitc_model *m, const char *dtype, vitc_error *err) {
    clear(err);
    if (!m) return fail(err, VITC_E_ARGUMENT, "no model (NULL)");
    if (!dtype || (strcmp(dtype, "fp32") != 0 && strcmp(dtype, "int8") != 0 && strcmp(dtype, "bf16") != 0))
        return fail(err, VITC_E_ARGUMENT, "%s: unknown dtype '%s' (fp32, bf16 or int8)", m->cfg.name,
                    dtype ? dtype : "(NULL)");
    const int int8 = strcmp(dtype, "int8") == 0, bf16 = strcmp(dtype, "bf16") == 0;
    if (bf16) { /* refused now, not at the next call's graph, where the CPU has no bf16 kernel */
        vt_gemm_plan p;
        vt_err e = {0};
        const int bad = vt_gemm_plan_init(&p, getenv("VITC_GEMM"), &e) || vt_gemm_plan_bf16(&p, &e);
        vt_gemm_plan_free(&p);
        if (bad) return fail(err, code_of(&e, VITC_E_UNSUPPORTED), "%s: %s", m->cfg.name, e.msg);
    }
    vt_err ce = {0};
    if (claim(m, &ce)) return fail(err, VITC_E_BUSY, "%s", ce.msg);
    if (m->int8 != int8 || m->bf16 != bf16) {
        m->int8 = int8;
        m->bf16 = bf16;
        vt_predictor_free(&m->pred); /* the next call builds the graph with the new kernels */
    }
    atomic_store(&m->busy, 0);
    return 0;
}

void vitc_close(vitc_model *m) {
    if (!m) return;
    vt_predictor_free(&m->pred);
    vt_params_free(m->P);
    vt_classes_free(m->classes, m->classes ? m->cfg.arch.num_classes : 0);
    free(m);
}

void vitc_int8_layers(const vitc_model *m, int *linears, int *int8) {
    const vt_dtype_use u = m ? m->last : (vt_dtype_use){0, 0, 0};
    if (linears) *linears = u.linears;
    if (int8) *int8 = u.int8;
}

void vitc_get_info(const vitc_model *m, vitc_info *info) {
    if (info) memset(info, 0, sizeof *info);
    if (!m || !info) return;
    const vt_arch_cfg *a = &m->cfg.arch;
    info->name = m->cfg.name;
    info->family = m->cfg.family->name;
    info->img_size = a->img_size;
    info->in_chans = a->in_chans;
    info->num_classes = a->num_classes;
    info->any_size = vt_model_any_size(&m->cfg);
    info->params = m->params;
    info->gmacs = m->gmacs;
}

void vitc_input_size(const vitc_model *m, int *height, int *width) {
    if (height) *height = m ? m->cfg.arch.img_size : 0;
    if (width) *width = m ? vt_arch_width(&m->cfg.arch) : 0;
}

/* The model's graph for n images of h x w pixels computing `what` (VT_PRED_*), reused when it matches or computes
 * more (a classification after pooled features runs their graph: alternating the two builds once). */
static vt_predictor *predictor(vitc_model *m, int n, int h, int w, int what, vt_err *e) {
    const int B = n < m->batch ? n : m->batch;
    vt_predictor *p = &m->pred;
    /* threads 0: the caller's setting of this call (the graph's scratch is sized for its thread count) */
    const int same_threads = m->threads > 0 || !p->g || p->g->threads == vt_threads_usable(omp_get_max_threads());
    int ph = 0, pw = 0;
    if (p->g) vt_arch_input(&p->cfg.arch, &ph, &pw);
    if (p->g && same_threads && (m->pred_what & what) == what && p->batch == B && ph == h && pw == w) return p;
    vt_predictor_free(p);
    vt_model_cfg c;
    if (vt_model_at_size(&m->cfg, h, w, &c, e)) return NULL;
    c.arch.int8 = m->int8;
    c.arch.bf16 = m->bf16;
    if (vt_predictor_init(p, &c, m->P, B, what, e)) return NULL;
    m->pred_what = what;
    return p;
}

/* Checks a call's common arguments: the model, n images and (when k_used) k. */
static int check_args(const vitc_model *m, const void *in, int n, int k, int k_used, const void *out, vitc_error *err) {
    clear(err);
    const int A = VITC_E_ARGUMENT;
    if (!m) return fail(err, A, "no model (NULL)");
    if (!in || !out) return fail(err, A, "%s: NULL input or output array", m->cfg.name);
    if (n < 1 || n > (1 << 24)) return fail(err, A, "%s: image count %d is outside [1, 2^24]", m->cfg.name, n);
    if (k_used && (k < 1 || k > VITC_MAX_TOPK))
        return fail(err, A, "%s: k = %d is outside [1, %d]", m->cfg.name, k, VITC_MAX_TOPK);
    return 0;
}

/* Image sources for vt_predictor_classify. */
typedef struct {
    const void *items; /* paths, vitc_pixels or floats */
    int64_t per;       /* floats per image (tensors) */
} source;

static int file_source(void *ctx, int i, const vt_preprocess *pp, float *out, vt_err *e) {
    return vt_image_load(((const char *const *)((source *)ctx)->items)[i], pp, out, e);
}

static int pixel_source(void *ctx, int i, const vt_preprocess *pp, float *out, vt_err *e) {
    const vitc_pixels *px = (const vitc_pixels *)((source *)ctx)->items + i;
    if (!px->data) return vt_seterr_code(e, VT_E_USAGE, "image %d: no pixel data (NULL)", i);
    if (px->channels < 1 || px->channels > 4)
        return vt_seterr_code(e, VT_E_USAGE, "image %d: %d channels (1 L, 2 LA, 3 RGB or 4 RGBA expected)", i,
                              px->channels);
    if (px->width < 1 || px->height < 1 || px->width > VT_IMAGE_MAX_SIDE || px->height > VT_IMAGE_MAX_SIDE)
        return vt_seterr_code(e, VT_E_USAGE, "image %d: %d×%d pixels (each side must be 1..%d)", i, px->width,
                              px->height, VT_IMAGE_MAX_SIDE);
    vt_err ce = {0};
    unsigned char *pix = vt_image_convert(px->data, px->width, px->height, px->channels, pp->chans, &ce);
    const int rc = pix ? vt_image_preprocess(pix, px->width, px->height, pp, out, &ce) : -1;
    free(pix);
    return rc ? vt_seterr_from(e, &ce, "image %d: %s", i, ce.msg) : 0;
}

static int tensor_source(void *ctx, int i, const vt_preprocess *pp, float *out, vt_err *e) {
    const source *s = ctx;
    const float *x = (const float *)s->items + s->per * i;
    (void)pp;
    for (int64_t j = 0; j < s->per; j++)
        if (!isfinite(x[j])) return vt_seterr_code(e, VT_E_USAGE, "image %d: the input holds NaN or Inf", i);
    memcpy(out, x, sizeof(float) * (size_t)s->per);
    return 0;
}

/* Classifies n images from src with the model at h x w, converting the results; bad_image: the VITC_E_* of an image
 * that failed without a kind of its own (VITC_E_IMAGE for files and pixels, VITC_E_FAILED for tensors). */
static int classify(vitc_model *m, vt_image_source src, source *ctx, const char *const *names, int n, int h, int w,
                    int k, int bad_image, vitc_result *out, vitc_error *err) {
    vt_err e = {0};
    call_env env = {0, 0};
    if (enter(m, &env, &e)) return fail(err, VITC_E_BUSY, "%s", e.msg);
    vt_prediction *res = calloc((size_t)n, sizeof *res);
    vt_predictor *p = res ? predictor(m, n, h, w, VT_PRED_LOGITS, &e) : NULL;
    if (!res) vt_seterr_code(&e, VT_E_NOMEM, "out of memory (%d results)", n);
    ctx->per = p ? p->in->numel / p->batch : 0;
    const int bad = p ? vt_predictor_classify(p, src, ctx, names, n, k, res, NULL, NULL, NULL, NULL) : -1;
    for (int i = 0; bad >= 0 && i < n; i++)
        if (res[i].ok || res[i].err.code == VT_E_NONFINITE) m->last = vt_graph_dtype_use(p->g); /* the graph ran */
    leave(m, &env);
    for (int i = 0; bad >= 0 && i < n; i++) {
        vitc_result *r = &out[i];
        memset(r, 0, sizeof *r);
        r->ok = res[i].ok;
        format_into(r->error, sizeof r->error, "%s", res[i].ok ? "" : res[i].err.msg);
        r->code = res[i].ok ? VITC_OK : code_of(&res[i].err, bad_image);
        r->k = res[i].ok ? res[i].top.k : 0;
        for (int j = 0; j < r->k; j++) {
            r->index[j] = res[i].top.cls[j];
            r->prob[j] = res[i].top.prob[j];
            r->label[j] = m->classes ? m->classes[r->index[j]] : vt_model_class_name(&m->cfg, m->P, r->index[j]);
        }
    }
    free(res);
    if (bad < 0) return fail(err, code_of(&e, VITC_E_FAILED), "%s", e.msg);
    return bad;
}

/* -1 with the reason when m's input is no image's (images decode to 1 or 3 channels: L or RGB). */
static int image_model(const vitc_model *m, vitc_error *err) {
    const int C = m->cfg.arch.in_chans;
    if (C == 1 || C == 3) return 0;
    return fail(err, VITC_E_ARGUMENT, "%s takes %d input channels, and images feed models of 1 (L) or 3 (RGB): give "
                "it preprocessed tensors (vitc_classify_tensor, vitc_logits)", m->cfg.name, C);
}

int vitc_classify_files(vitc_model *m, const char *const *paths, int n, int k, vitc_result *out, vitc_error *err) {
    if (check_args(m, paths, n, k, 1, out, err) || image_model(m, err)) return -1;
    for (int i = 0; i < n; i++)
        if (!paths[i]) return fail(err, VITC_E_ARGUMENT, "%s: path %d is NULL", m->cfg.name, i);
    source s = {paths, 0};
    return classify(m, file_source, &s, paths, n, m->cfg.arch.img_size, vt_arch_width(&m->cfg.arch), k, VITC_E_IMAGE,
                    out, err);
}

int vitc_classify_pixels(vitc_model *m, const vitc_pixels *images, int n, int k, vitc_result *out, vitc_error *err) {
    if (check_args(m, images, n, k, 1, out, err) || image_model(m, err)) return -1;
    source s = {images, 0};
    return classify(m, pixel_source, &s, NULL, n, m->cfg.arch.img_size, vt_arch_width(&m->cfg.arch), k, VITC_E_IMAGE,
                    out, err);
}

/* The height *h and width *w of tensor calls (both 0: the model's size) after checking that the model takes them; -1
 * on error. */
static int checked_size(const vitc_model *m, int *h, int *w, vitc_error *err) {
    if (*h == *w && (*h < 0 || *h > 4096))
        return fail(err, VITC_E_ARGUMENT, "%s: size %d is outside [0, 4096]", m->cfg.name, *h);
    if (*h < 0 || *h > 4096 || *w < 0 || *w > 4096 || (*h == 0) != (*w == 0))
        return fail(err, VITC_E_ARGUMENT, "%s: size %dx%d is outside [1, 4096] a side (or 0x0, the model's)",
                    m->cfg.name, *h, *w);
    if (!*h) {
        *h = m->cfg.arch.img_size;
        *w = vt_arch_width(&m->cfg.arch);
    }
    vt_model_cfg at; /* a size the model cannot take is refused before its images are read */
    vt_err e = {0};
    if (vt_model_at_size(&m->cfg, *h, *w, &at, &e)) return fail(err, code_of(&e, VITC_E_ARGUMENT), "%s", e.msg);
    return 0;
}

int vitc_classify_tensor(vitc_model *m, const float *x, int n, int size, int k, vitc_result *out, vitc_error *err) {
    int w = size;
    if (check_args(m, x, n, k, 1, out, err) || checked_size(m, &size, &w, err)) return -1;
    source s = {x, 0};
    return classify(m, tensor_source, &s, NULL, n, size, w, k, VITC_E_FAILED, out, err);
}

int vitc_load_image(vitc_model *m, const char *path, float *out, vitc_error *err) {
    if (check_args(m, path, 1, 0, 0, out, err) || image_model(m, err)) return -1;
    const vt_preprocess pp = vt_model_preprocess(&m->cfg);
    vt_err e = {0};
    const unsigned csr = fp_nearest();
    const int rc = vt_image_load(path, &pp, out, &e);
#if defined(__SSE2__)
    _mm_setcsr(csr);
#else
    (void)csr;
#endif
    return rc ? fail(err, code_of(&e, VITC_E_IMAGE), "%s", e.msg) : 0;
}

static int tensor_new(vitc_tensor *t, int n, int ndim, const int *shape);

/* checked_size, then the n images x (finite values); -1 on error. */
static int tensor_size(const vitc_model *m, const float *x, int n, int *h, int *w, vitc_error *err) {
    if (checked_size(m, h, w, err)) return -1;
    const int64_t per = (int64_t)m->cfg.arch.in_chans * *h * *w;
    for (int64_t j = 0; j < per * n; j++)
        if (!isfinite(x[j]))
            return fail(err, VITC_E_ARGUMENT, "%s: image %lld of the input holds NaN or Inf", m->cfg.name,
                        (long long)(j / per));
    return 0;
}

/* The output of p that a call copies: the logits (-1), the pooled features (-2) or stage map i. */
static const vt_tensor *output(const vt_predictor *p, int which) {
    return which == -1 ? p->logits : which == -2 ? p->pooled : p->maps[which];
}

/* Runs n images x (already checked, of h x w) through the model's graph for `what`, and copies the outputs `which`
 * (nout of them, see output()) into dst[0..nout), each allocated first as a tensor when alloc (else dst[0].data is
 * the caller's buffer). Returns the number of outputs, or -1. */
static int run(vitc_model *m, const float *x, int n, int h, int w, int what, const int *which, int nout, int alloc,
               vitc_tensor *dst, vitc_error *err) {
    vt_err e = {0};
    call_env env = {0, 0};
    if (enter(m, &env, &e)) return fail(err, VITC_E_BUSY, "%s", e.msg);
    vt_predictor *p = predictor(m, n, h, w, what, &e);
    int nonfinite = 0;
    if (p && nout < 0) nout = p->nmaps; /* every stage map */
    for (int i = 0; p && alloc && i < nout; i++) {
        const vt_tensor *t = output(p, which ? which[i] : i);
        if (tensor_new(&dst[i], n, t->ndim, t->shape)) {
            for (int j = 0; j < i; j++) vitc_tensor_free(&dst[j]);
            vt_seterr_code(&e, VT_E_NOMEM, "%s: out of memory for the outputs of %d images", m->cfg.name, n);
            p = NULL;
        }
    }
    const int64_t per = p ? p->in->numel / p->batch : 0;
    for (int i0 = 0; p && i0 < n; i0 += p->batch) {
        const int nb = n - i0 < p->batch ? n - i0 : p->batch;
        vt_predictor_forward(p, x + per * i0, nb);
        m->last = vt_graph_dtype_use(p->g);
        for (int i = 0; i < nout; i++) {
            const vt_tensor *t = output(p, which ? which[i] : i);
            const int64_t row = t->numel / p->batch;
            memcpy(dst[i].data + row * i0, t->data, sizeof(float) * (size_t)(row * nb));
            for (int64_t j = 0; !nonfinite && j < row * nb; j++) /* as the classifying calls refuse NaN logits */
                if (!isfinite(t->data[j])) {
                    vt_seterr_code(&e, VT_E_NONFINITE, "%s: image %lld: the model's outputs are not finite (%s): the "
                                   "weights overflow on this input", m->cfg.name, (long long)(i0 + j / row),
                                   isnan(t->data[j]) ? "NaN" : "Inf");
                    nonfinite = 1;
                }
        }
        if (nonfinite) {
            p = NULL;
            break;
        }
    }
    for (int i = 0; nonfinite && alloc && i < nout; i++) vitc_tensor_free(&dst[i]); /* every one allocated */
    leave(m, &env);
    return p ? nout : fail(err, code_of(&e, VITC_E_FAILED), "%s", e.msg);
}

int vitc_logits_hw(vitc_model *m, const float *x, int n, int h, int w, float *logits, vitc_error *err) {
    if (check_args(m, x, n, 0, 0, logits, err) || tensor_size(m, x, n, &h, &w, err)) return -1;
    vitc_tensor t = {2, {n, m->cfg.arch.num_classes, 0, 0}, logits};
    const int which = -1;
    return run(m, x, n, h, w, VT_PRED_LOGITS, &which, 1, 0, &t, err) < 0 ? -1 : 0;
}

int vitc_logits(vitc_model *m, const float *x, int n, int size, float *logits, vitc_error *err) {
    return vitc_logits_hw(m, x, n, size, size, logits, err);
}

/* Allocates t as a tensor of the given shape with first dimension n; -1 when out of memory. */
static int tensor_new(vitc_tensor *t, int n, int ndim, const int *shape) {
    memset(t, 0, sizeof *t);
    size_t numel = (size_t)n;
    t->ndim = ndim;
    t->shape[0] = n;
    for (int d = 1; d < ndim && d < 4; d++) numel *= (size_t)(t->shape[d] = shape[d]);
    if (ndim <= 4 && (t->data = malloc(sizeof(float) * numel))) return 0;
    memset(t, 0, sizeof *t); /* a failed call leaves its outputs zeroed, as documented */
    return -1;
}

void vitc_tensor_free(vitc_tensor *t) {
    if (!t) return;
    free(t->data);
    memset(t, 0, sizeof *t);
}

int vitc_pooled_features_hw(vitc_model *m, const float *x, int n, int h, int w, vitc_tensor *out, vitc_error *err) {
    if (out) memset(out, 0, sizeof *out); /* defined whatever the outcome: vitc_tensor_free is safe on it */
    if (check_args(m, x, n, 0, 0, out, err) || tensor_size(m, x, n, &h, &w, err)) return -1;
    const int which = -2;
    return run(m, x, n, h, w, VT_PRED_LOGITS | VT_PRED_POOLED, &which, 1, 1, out, err) < 0 ? -1 : 0;
}

int vitc_pooled_features(vitc_model *m, const float *x, int n, int size, vitc_tensor *out, vitc_error *err) {
    return vitc_pooled_features_hw(m, x, n, size, size, out, err);
}

int vitc_stage_features_hw(vitc_model *m, const float *x, int n, int h, int w, vitc_tensor maps[VITC_MAX_STAGES],
                           vitc_error *err) {
    if (maps) memset(maps, 0, sizeof(vitc_tensor) * VITC_MAX_STAGES); /* the unused entries too: safe to free */
    if (check_args(m, x, n, 0, 0, maps, err) || tensor_size(m, x, n, &h, &w, err)) return -1;
    return run(m, x, n, h, w, VT_PRED_MAPS, NULL, -1, 1, maps, err);
}

int vitc_stage_features(vitc_model *m, const float *x, int n, int size, vitc_tensor maps[VITC_MAX_STAGES],
                        vitc_error *err) {
    return vitc_stage_features_hw(m, x, n, size, size, maps, err);
}
