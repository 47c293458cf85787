/* Loading a checkpoint for fine-tuning, as timm's checkpoint_filter_fn adapts one:
 * - a classifier tensor (name holding "head") whose class count differs keeps the model's fresh initialisation;
 * - an absolute position embedding (1, p + h·w, C) whose grid differs is resized bicubically keeping its p prefix
 *   (class / distillation) rows (ViT/DeiT, Refined-ViT, PVT, FLatten's positional_encoding), as DeiT's main.py
 *   fine-tuning and timm 0.4's resize_pos_embed: torch's F.interpolate(bicubic, align_corners=False), no antialias
 *   (timm's newer resample_abs_pos_embed antialiases by default);
 * - a Swin relative_position_bias_table ((2w-1)², heads) is resized bicubically (timm's
 *   resize_rel_pos_bias_table_simple);
 * - the input convolution (O, 3, kh, kw) of an RGB file (the model's first 4-D tensor) meets a model with other
 *   input channels as timm's adapt_input_conv adapts it: summed over the three for one channel, otherwise the three
 *   repeated over the channels and scaled by 3 / channels (a start, not an equivalence: the grey model normalises
 *   with other statistics than the RGB one's per-channel mean and std, as in timm);
 * - fixed buffers (relative_position_index, attn_mask) stay the model's own, and the file's ones the model lacks are
 *   dropped (timm's Swin filter); a file of the other form (Next-ViT deployed vs training) is refused. */
#include "vitc/adapt.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vitc/error.h"
#include "vitc/safetensors.h"
#include "vitc/weights.h"

/* One line of the adaptation's log (NULL: none), its control characters escaped: tensor names and records of the
 * file get into it. */
static void log_line(FILE *log, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void log_line(FILE *log, const char *fmt, ...) {
    if (!log) return;
    char text[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    vt_write_line(log, "init-from: ", text, 1);
}

/* torch's cubic convolution weights (A = -0.75) of the 4 taps around a source position with fraction t. */
static void cubic_coeffs(double t, double w[4]) {
    const double A = -0.75;
#define CC1(x) (((A + 2) * (x) - (A + 3)) * (x) * (x) + 1)
#define CC2(x) ((((A * (x)) - 5 * A) * (x) + 8 * A) * (x) - 4 * A)
    w[0] = CC2(t + 1.0);
    w[1] = CC1(t);
    w[2] = CC1(1.0 - t);
    w[3] = CC2(2.0 - t);
#undef CC1
#undef CC2
}

/* Source taps (clamped indices) and weights of output index o for a resize from n_in to n_out (align_corners False,
 * no clamping of the real source position, as torch does for cubic). */
static void taps(int o, int n_in, int n_out, int idx[4], double w[4]) {
    const double scale = (double)n_in / n_out, real = scale * (o + 0.5) - 0.5, fl = floor(real);
    cubic_coeffs(real - fl, w);
    for (int k = 0; k < 4; k++) {
        int i = (int)fl - 1 + k;
        idx[k] = i < 0 ? 0 : i > n_in - 1 ? n_in - 1 : i;
    }
}

void vt_resize_bicubic(const float *src, int h, int w, int C, float *dst, int H, int W) {
    for (int y = 0; y < H; y++) {
        int iy[4], ix[4];
        double wy[4], wx[4];
        taps(y, h, H, iy, wy);
        for (int x = 0; x < W; x++) {
            taps(x, w, W, ix, wx);
            for (int c = 0; c < C; c++) {
                double acc = 0.0;
                for (int a = 0; a < 4; a++)
                    for (int b = 0; b < 4; b++) acc += wy[a] * wx[b] * src[((size_t)iy[a] * w + ix[b]) * C + c];
                dst[((size_t)y * W + x) * C + c] = (float)acc;
            }
        }
    }
}

typedef enum { KEEP, SAME, HEAD, POS, RPB, CHANS } action;

/* The side of a square n (0 if n is not a positive square). */
static int isqrt_exact(int64_t n) {
    if (n <= 0) return 0;
    int s = (int)llround(sqrt((double)n));
    return (int64_t)s * s == n ? s : 0;
}

/* The model's position grid of a position embedding of n rows after its prefix: its square side (*h = *w), or the
 * non-square grid pos_h × pos_w where that holds n rows; 0 when neither. */
static int pos_grid(int64_t n, int pos_h, int pos_w, int *h, int *w) {
    *h = *w = isqrt_exact(n);
    if (!*h && pos_h > 0 && pos_w > 0 && (int64_t)pos_h * pos_w == n) *h = pos_h, *w = pos_w;
    return *h > 0;
}

/* Whether the file's entry s has model tensor t's shape. */
static int same_shape(const vt_tensor *t, const vt_st_entry *s) {
    int same = s->ndim == t->ndim;
    for (int d = 0; same && d < t->ndim; d++) same = s->shape[d] == t->shape[d];
    return same;
}

/* What to do with model tensor t given the file's entry s (input_conv: the model's first 4-D tensor; pos_h × pos_w
 * the model's non-square patch grid, vt_adapt_load); for POS, *prefix gets the kept leading rows. */
static action plan(const vt_tensor *t, const vt_st_entry *s, int num_classes, int in_chans, const vt_tensor *input_conv,
                   int pos_h, int pos_w, int *prefix) {
    if (same_shape(t, s)) return SAME;
    if (s->ndim != t->ndim) return KEEP;
    int rest = 1; /* every dimension but the first equal */
    for (int d = 1; d < t->ndim; d++) rest &= s->shape[d] == t->shape[d];
    if (strstr(t->name, "head") && rest && t->shape[0] == num_classes) return HEAD;
    if (t == input_conv && s->shape[0] == t->shape[0] && s->shape[2] == t->shape[2] && s->shape[3] == t->shape[3] &&
        t->shape[1] == in_chans && s->shape[1] == 3) /* the input convolution of an RGB model */
        return CHANS;
    if (t->ndim == 3 && t->shape[0] == 1 && s->shape[0] == 1 && s->shape[2] == t->shape[2])
        for (int p = 0, gh, gw; p <= 2; p++)
            if (pos_grid(t->shape[1] - p, pos_h, pos_w, &gh, &gw) && isqrt_exact(s->shape[1] - p)) {
                *prefix = p;
                return POS;
            }
    const char *suf = "relative_position_bias_table";
    const size_t ln = strlen(t->name), ls = strlen(suf);
    if (t->ndim == 2 && rest && ln >= ls && !strcmp(t->name + ln - ls, suf) && isqrt_exact(t->shape[0]) &&
        isqrt_exact(s->shape[0]))
        return RPB;
    return KEEP;
}

/* Appends name to a comma-separated list of at most 8 names (then "…"), counting them. */
static void note(char *buf, size_t cap, int *count, const char *name) {
    if (++*count > 8) {
        if (*count == 9) snprintf(buf + strlen(buf), cap - strlen(buf), ", ...");
        return;
    }
    snprintf(buf + strlen(buf), cap - strlen(buf), "%s%s", *count > 1 ? ", " : "", name);
}

/* Buffers that models derive from their configuration (timm's Swin checkpoint_filter_fn drops them too). */
static int derived_buffer(const char *name) {
    return strstr(name, "relative_position_index") || strstr(name, "attn_mask");
}

int vt_adapt_load(vt_params *P, int num_classes, int in_chans, int pos_h, int pos_w, const char *path, FILE *log,
                  vt_err *e) {
    vt_params_changed(P);
    vt_st_file f;
    if (vt_st_open(path, &f, e)) return -1;
    char form[48]; /* files without the record hold the training form; copied: closing the file frees its metadata */
    const char *rec = vt_st_meta(&f, VT_FORM_KEY);
    if (!rec && P->form && log) /* both forms share their keys (Next-ViT): nothing in the file tells them apart */
        log_line(log, "%s records no form: taken as the training form, as official checkpoints are (a "
                 "merge_bn export would have its BatchNorms applied twice: convert such a checkpoint with "
                 "convert_checkpoint.py --form deployed)", path);
    snprintf(form, sizeof form, "%s", rec ? rec : "training");
    const int known = strcmp(form, "training") == 0 || strcmp(form, "deployed") == 0;
    if (P->form && (!known || strcmp(form, P->form) != 0)) {
        vt_st_close(&f);
        if (!known) return vt_seterr(e, "%s records an unknown form '%.40s' (metadata %s)", path, form, VT_FORM_KEY);
        return vt_seterr(e, "%s holds %s-form weights but the model is built in its %s form%s", path, form, P->form,
                         strcmp(form, "deployed") == 0
                             ? " (a training run's): start from training-form weights (a run's weights.safetensors, "
                               "or `vitc init --train-form`); merged BatchNorms cannot be split again"
                             : " (see `vitc deploy`)");
    }
    for (int i = 0; i < f.n; i++)
        if (strncmp(f.entries[i].name, "optim/", 6) == 0) { /* a run's checkpoint.safetensors */
            vt_st_close(&f);
            return vt_seterr(e, "%s is a training checkpoint (its optimiser state, `optim/`, is not a model's): "
                             "fine-tune from the run's weights.safetensors or weights_best.safetensors", path);
        }
    const vt_tensor *input_conv = NULL; /* every model's first 4-D tensor is its input convolution */
    for (int i = 0; i < P->n && !input_conv; i++)
        if (P->t[i]->ndim == 4) input_conv = P->t[i];
    char miss[1024] = "", extra[1024] = "", bad[1024] = "";
    int nmiss = 0, nextra = 0, nbad = 0, nadapt = 0, rep_missing = 0, file_rep = 0;
    for (int i = 0; i < f.n; i++) file_rep |= strstr(f.entries[i].name, ".rep.") != NULL;
    for (int i = 0; i < P->n; i++) {
        const vt_tensor *t = P->t[i];
        const vt_st_entry *s = vt_st_find(&f, t->name);
        int p = 0;
        if (t->init.kind == VT_INIT_FIXED) { /* recomputed by the model; one of another shape (Swin's attn_mask at
                                               * another image size) is not for the strict loader below */
            nadapt += s && !same_shape(t, s);
            continue;
        }
        if (!s && vt_weights_may_be_absent(t)) continue; /* a BatchNorm's counter: the model's 0 */
        if (!s) {
            note(miss, sizeof miss, &nmiss, t->name);
            rep_missing += vt_weights_rep_merged_in(t->name, &f); /* a branch whose merge the file holds: deployed cFFN */
            continue;
        }
        action a = plan(t, s, num_classes, in_chans, input_conv, pos_h, pos_w, &p);
        if (a == KEEP) { /* named with both shapes */
            char nm[VT_NAMELEN + 128], fs[48] = "", ms[48] = "";
            for (int d = 0; d < s->ndim; d++)
                snprintf(fs + strlen(fs), sizeof fs - strlen(fs), "%s%lld", d ? "," : "", (long long)s->shape[d]);
            for (int d = 0; d < t->ndim; d++)
                snprintf(ms + strlen(ms), sizeof ms - strlen(ms), "%s%lld", d ? "," : "", (long long)t->shape[d]);
            snprintf(nm, sizeof nm, "%s (file [%s], model [%s])", t->name, fs, ms);
            note(bad, sizeof bad, &nbad, nm);
        }
        nadapt += a != SAME;
    }
    for (int i = 0; i < f.n; i++) {
        if (vt_params_find(P, f.entries[i].name)) continue;
        if (!derived_buffer(f.entries[i].name)) {
            note(extra, sizeof extra, &nextra, f.entries[i].name);
        } else {
            nadapt++; /* e.g. a shift mask the new window no longer needs */
        }
    }
    if (nmiss || nextra || nbad) {
        const char *why = rep_missing && !file_rep && nextra /* the branches absent, their merges in their place */
                              ? " they hold the deployed form of re-parameterised blocks (cFFN's `.rep.` branches "
                                "merged by `vitc deploy`, which cannot be split again): fine-tune from a training-form "
                                "file (a run's weights.safetensors, or `vitc init --train-form`);"
                              : "";
        const char *model = vt_st_meta(&f, VT_MODEL_KEY); /* a file of another model says so first */
        char other[192] = "";
        if (model && P->model && strcmp(model, P->model) != 0)
            snprintf(other, sizeof other, " (it holds the weights of %.64s, not %.64s)", model, P->model);
        const char *ropts = vt_st_meta(&f, VT_OPTIONS_KEY); /* the options the file's model was built with (a file
                                                               * vitc wrote, naming its model, records none: none) */
        if (!ropts && model) ropts = "";
        char opts[512] = "";
        if (ropts && (!model || !P->model || strcmp(model, P->model) == 0) && strcmp(ropts, P->options) != 0)
            snprintf(opts, sizeof opts, " (the file records %s%.200s%s, this model is built with %s%.60s%s: --init-from "
                     "adapts the head, positions and input channels, not block types or widths)",
                     ropts[0] ? "the model options \"" : "no model options", ropts, ropts[0] ? "\"" : "",
                     P->options[0] ? "\"" : "none", P->options, P->options[0] ? "\"" : "");
        vt_seterr(e, "%s: cannot fine-tune from these weights%s%s:%s%s%s%s%s%s%s%s%s", path, other, opts, why,
                  nmiss ? " missing " : "", miss, nmiss && (nextra || nbad) ? ";" : "", nextra ? " unexpected " : "",
                  extra, nextra && nbad ? ";" : "", nbad ? " shapes that no adaptation explains (head, position "
                  "embedding, relative-position table, an RGB input convolution): " : "", bad);
        vt_st_close(&f);
        return -1;
    }
    /* the tensors fit: the heads and attention they were made for must too */
    if (vt_weights_check_heads(P, &f, path, e) || vt_weights_check_attn(P, &f, path, e)) {
        vt_st_close(&f);
        return -1;
    }
    const char *rw = vt_st_meta(&f, VT_WINDOWS_KEY); /* the windows or stripes it was made with */
    if (log && rw && P->windows[0] && strcmp(rw, P->windows) != 0)
        log_line(log, "attention windows (Swin) or stripe widths (CSwin) %.40s in %s, %s in the model", rw,
                 path, P->windows);
    if (nadapt == 0) { /* nothing to adapt: the strict loader (dtype, finiteness, fixed buffers) on the file read
                        * (a pipe or FIFO cannot be read twice) */
        char windows[sizeof P->windows]; /* but a fine-tuning start may change the stripes (CSwin 224 -> 384) */
        memcpy(windows, P->windows, sizeof windows);
        P->windows[0] = '\0';
        const int rc = vt_params_load_file(P, &f, path, e);
        memcpy(P->windows, windows, sizeof windows);
        vt_st_close(&f);
        return rc;
    }
    for (int i = 0; log && i < f.n; i++)
        if (!vt_params_find(P, f.entries[i].name))
            log_line(log, "%s dropped (the model derives its own)", f.entries[i].name);
    /* Two passes, as the strict loader: every tensor read and checked in scratch first, then copied into P, so a
     * failure leaves P as it was (its fresh initialisation) */
    int64_t most = 1;
    for (int i = 0; i < P->n; i++) {
        const vt_st_entry *s = P->t[i]->init.kind == VT_INIT_FIXED ? NULL : vt_st_find(&f, P->t[i]->name);
        if (s && s->numel > most) most = s->numel;
    }
    float *src = vt_alloc(sizeof(float) * (size_t)most, e);
    int rc = src ? 0 : -1;
    for (int pass = 0; pass < 2 && rc == 0; pass++)
        for (int i = 0; rc == 0 && i < P->n; i++) {
            vt_tensor *t = P->t[i];
            const vt_st_entry *s = t->init.kind == VT_INIT_FIXED ? NULL : vt_st_find(&f, t->name);
            if (!s) continue;
            int p = 0;
            const action a = plan(t, s, num_classes, in_chans, input_conv, pos_h, pos_w, &p);
            if (pass == 0) {
                if (a == SAME) /* checked as the strict loader checks it (dtype, finite, running variances) */
                    rc = vt_param_read(&f, t->name, t, src, path, e);
                else if (s->dtype != VT_ST_F32 && s->dtype != VT_ST_F16 && s->dtype != VT_ST_BF16)
                    rc = vt_seterr(e, "%s: tensor %s is %s (want F32/F16/BF16)", path, t->name,
                                   vt_st_dtype_name(s->dtype));
                else if (a != HEAD && (rc = vt_st_read_f32(s, src, s->numel, e)) == 0) /* a head's values go unused */
                    for (int64_t j = 0; rc == 0 && j < s->numel; j++)
                        if (!isfinite(src[j]))
                            rc = vt_seterr(e, "%s: tensor '%s' holds %s at element %lld; weights must be finite",
                                           path, t->name, isnan(src[j]) ? "NaN" : "Inf", (long long)j);
                continue;
            }
            if (a == HEAD) { /* keeps its initialisation */
                log_line(log, "%s re-initialised: %lld classes in %s, %d in the model (--num-classes)",
                         t->name, (long long)s->shape[0], path, num_classes);
                continue;
            }
            /* checked above: only a file shortened meanwhile fails now */
            rc = vt_st_read_f32(s, a == SAME ? t->data : src, s->numel, e);
            if (rc || a == SAME) continue;
            if (a == POS) {
                const int C = t->shape[2], gs = isqrt_exact(s->shape[1] - p);
                int gh, gw;
                pos_grid(t->shape[1] - p, pos_h, pos_w, &gh, &gw);
                memcpy(t->data, src, sizeof(float) * (size_t)p * C); /* prefix tokens kept */
                vt_resize_bicubic(src + (size_t)p * C, gs, gs, C, t->data + (size_t)p * C, gh, gw);
                log_line(log, "%s resized bicubically from a %d×%d to a %d×%d grid (%d prefix token%s kept)",
                         t->name, gs, gs, gh, gw, p, p == 1 ? "" : "s");
            } else if (a == RPB) {
                const int ss = isqrt_exact(s->shape[0]), sm = isqrt_exact(t->shape[0]);
                vt_resize_bicubic(src, ss, ss, t->shape[1], t->data, sm, sm);
                log_line(log, "%s resized bicubically from %d×%d to %d×%d (window %d -> %d)", t->name,
                         ss, ss, sm, sm, (ss + 1) / 2, (sm + 1) / 2);
            } else if (a == CHANS) { /* timm's adapt_input_conv from 3 channels */
                const int O = t->shape[0], C = t->shape[1];
                const size_t k2 = (size_t)t->shape[2] * t->shape[3];
                for (int o = 0; o < O; o++)
                    for (int c = 0; c < C; c++)
                        for (size_t j = 0; j < k2; j++) {
                            const float *w = src + (size_t)o * 3 * k2 + j;
                            t->data[((size_t)o * C + c) * k2 + j] =
                                C == 1 ? w[0] + w[k2] + w[2 * k2] : w[(size_t)(c % 3) * k2] * (3.0f / (float)C);
                        }
                log_line(log, "%s adapted from 3 input channels to %d (%s, as timm's adapt_input_conv)",
                         t->name, C, C == 1 ? "summed" : "repeated and scaled by 3/channels");
            }
        }
    vt_free(src);
    vt_st_close(&f);
    return rc;
}
