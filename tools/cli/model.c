/* The commands on one model and its tensors: list (every model), info (one model's shapes, params and MACs), init
 * (initial weights), forward (logits or stage maps of `input`), grad (loss and gradients) and deploy (training-form
 * weights merged into the deployed form). */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "vitc/fileio.h"
#include "vitc/imagefolder.h"
#include "vitc/model.h"
#include "vitc/predict.h"
#include "vitc/safetensors.h"
#include "vitc/train.h"
#include "vitc/weights.h"

#include "cli.h"

/* Every model with params and GMACs; --csv: timm-style columns (param_count in millions, gmacs per image). */
int cmd_list(opts *o) {
    if (o->model) return refuse("list", "unexpected argument '%s' (`vitc list` takes no model)", o->model);
    if (o->csv)
        printf("model,param_count,gmacs,img_size,in_chans,num_classes,crop_pct,interpolation,family\n");
    else
        printf("%-36s %14s %9s  %s\n", "model", "params", "GMACs", "description");
    for (int i = 0; i < vt_model_count(); i++) {
        const vt_model_cfg *c = vt_model_at(i);
        vt_err e = {0};
        vt_model_summary s;
        const int ok = vt_model_summarize(c, &s, &e) == 0;
        if (o->csv) {
            csv_str(c->name);
            if (ok)
                printf(",%.6f,%.6f", s.params / 1e6, s.macs / 1e9);
            else
                printf(",,");
            printf(",%d,%d,%d,%.4g,", c->arch.img_size, c->arch.in_chans, c->arch.num_classes,
                   (double)(c->pre.crop_pct > 0.0f ? c->pre.crop_pct : 0.875f));
            csv_str(c->pre.interpolation ? c->pre.interpolation : "bicubic");
            putchar(',');
            csv_str(c->family->name);
            putchar('\n');
        } else if (ok) {
            printf("%-36s %14lld %9.3f  %s\n", c->name, (long long)s.params, s.macs / 1e9, c->description);
        } else {
            printf("%-36s  build error: %s\n", c->name, e.msg);
        }
        vt_model_summary_free(&s);
    }
    return 0;
}

/* Stage i's window or stripe width as --windows takes it: a windowed family's window 0 (one global branch:
 * FLatten-CSwin's L stages) as the stage's side. */
static int stage_window(const vt_model_cfg *c, int i) {
    const vt_arch_cfg *a = &c->arch;
    const int global = a->stages[i].window == 0 && (c->family->caps & VT_CAP_WINDOWS) && a->patch > 0;
    return global ? a->img_size / (a->patch << i) : a->stages[i].window;
}

/* The stages of c as JSON objects. */
static void print_stages_json(const vt_model_cfg *c) {
    const vt_arch_cfg *a = &c->arch;
    printf("\"stages\": [");
    for (int i = 0; i < a->nstages; i++) {
        char blocks[256];
        const int na = vt_model_stage_blocks(c, i, blocks, sizeof blocks);
        const int window = stage_window(c, i);
        printf("%s{\"dim\": %d, \"depth\": %d, \"heads\": %d, \"mlp_ratio\": %g, \"window\": %d, "
               "\"window_run\": %d, \"sr_ratio\": %d, \"attn\": \"%s\", \"attn_blocks\": %d, \"blocks\": \"%s\"}",
               i ? ", " : "", a->stages[i].dim, a->stages[i].depth, a->stages[i].heads, (double)a->stages[i].mlp_ratio,
               window, vt_model_window_run(c, i), a->stages[i].sr_ratio, a->stages[i].attn, na, blocks);
    }
    printf("]");
}

int cmd_info(opts *o) {
    vt_model_cfg c;
    const int mc = model_cfg(o, &c); /* 2: a malformed list option */
    if (mc) return mc;
    vt_err e = {0};
    vt_model_summary s;
    if (vt_model_summarize(&c, &s, &e)) return die("%s", e.msg);
    const vt_arch_cfg *a = &c.arch;
    const long long params = s.params, paper = s.paper_params, macs = s.macs;
    if (o->json) {
        printf("{\"name\": \"%s\", \"family\": \"%s\", \"params\": %lld, \"buffers\": %lld, "
               "\"params_linear_conv_weights\": %lld, \"macs\": %lld, \"gmacs\": %.6f, \"img_size\": %d, "
               "\"img_w\": %d, "
               "\"in_chans\": %d, \"num_classes\": %d, \"patch_size\": %d, \"embed_dim\": %d, \"num_features\": %d, "
               "\"depth\": %d, "
               "\"num_heads\": %d, \"double_heads\": %d, \"attn\": \"%s\", \"ffn\": \"%s\", \"train_form\": %d, ",
               c.name, c.family->name, params, (long long)s.buffers, paper, macs, macs / 1e9, a->img_size,
               vt_arch_width(a), a->in_chans,
               a->num_classes, a->patch, a->stages[0].dim, a->stages[a->nstages - 1].dim, vt_model_depth(&c),
               a->stages[0].heads,
               a->opts.double_heads, a->stages[0].attn, a->ffn, a->train_form);
        print_stages_json(&c);
        printf(", \"drop_path\": %g, \"pretrained\": {\"crop_pct\": %g, \"resize\": \"%s\", \"interpolation\": \"%s\", "
               "\"mean\": [%g, %g, %g], \"std\": [%g, %g, %g], \"dataset\": \"%s\"}", (double)a->drop_path,
               (double)c.pre.crop_pct, c.pre.squash || vt_arch_width(a) != a->img_size ? "both sides" : "shorter side",
               c.pre.interpolation ? c.pre.interpolation : "", (double)c.pre.mean[0], (double)c.pre.mean[1],
               (double)c.pre.mean[2], (double)c.pre.std[0], (double)c.pre.std[1], (double)c.pre.std[2],
               c.pre.dataset ? c.pre.dataset : "");
        printf(", \"blocks\": [");
    } else {
        printf("model      %s (%s)\n", c.name, c.description);
        printf("input      %d x %d x %d, %d classes\n", a->in_chans, a->img_size, vt_arch_width(a), a->num_classes);
        for (int i = 0; i < a->nstages; i++) {
            const int dbl = a->opts.double_heads && strcmp(a->stages[i].attn, "hmhsa") == 0;
            char blocks[256];
            if (vt_model_stage_blocks(&c, i, blocks, sizeof blocks) >= 0 && blocks[0]) /* they differ (Next-ViT) */
                printf("stage %d    dim %d, depth %d: %s\n", i + 1, a->stages[i].dim, a->stages[i].depth, blocks);
            else {
                char win[48] = ""; /* Swin's window, CSwin's stripe width: as configured, and as run */
                const int w = stage_window(&c, i), run = vt_model_window_run(&c, i);
                if (c.family->caps & VT_CAP_WINDOWS)
                    snprintf(win, sizeof win, run == w ? ", window %d" : ", window %d (runs %d)", w, run);
                printf("stage %d    dim %d, depth %d, heads %d%s, MLP %gx, attention %s%s\n", i + 1, a->stages[i].dim,
                       a->stages[i].depth, a->stages[i].heads, dbl ? " (doubled to run: --double-heads)" : "",
                       (double)a->stages[i].mlp_ratio, a->stages[i].attn, win);
            }
        }
        printf("FFN        %s%s\n", a->ffn, a->train_form ? " (training form)" : "");
        printf("params     %lld (%.3f M); Linear/Conv weights only: %lld (%.3f M)\n", params, params / 1e6,
               paper, paper / 1e6);
        printf("buffers    %lld\n", (long long)s.buffers);
        printf("MACs       %lld (%.3f GMACs per image; 1 multiply-add = 1 MAC)\n\n", macs, macs / 1e9);
        printf("%-20s %12s %14s\n", "scope", "params", "MACs");
    }
    for (int i = 0, first = 1; i < s.nscopes; i++) {
        if (!s.scope_params[i] && !s.scope_macs[i]) continue;
        const char *nm = s.scope[i][0] ? s.scope[i] : "(top)";
        if (o->json)
            printf("%s{\"name\": \"%s\", \"params\": %lld, \"macs\": %lld}", first ? "" : ", ", nm,
                   (long long)s.scope_params[i], (long long)s.scope_macs[i]);
        else
            printf("%-20s %12lld %14lld\n", nm, (long long)s.scope_params[i], (long long)s.scope_macs[i]);
        first = 0;
    }
    if (o->json) printf("]}\n");
    vt_model_summary_free(&s);
    return 0;
}

int cmd_init(opts *o) {
    vt_model_cfg c;
    const int mc = model_cfg(o, &c); /* 2: a malformed list option */
    if (mc) return mc;
    if (!o->output) return missing("-o OUTPUT");
    if (output_ok(o, 0)) return 1;
    vt_params *P = load_model(o, &c);
    if (!P) return 1;
    vt_err e = {0};
    int rc = vt_params_save(P, o->output, &e) ? die("%s", e.msg) : 0;
    if (!rc) printf("wrote %s: %lld params of %s (seed %lld)\n", o->output, (long long)vt_params_count(P, VT_PARAM),
                    c.name, o->seed);
    vt_params_free(P);
    return rc;
}

/* Opens o->input into f (read once: a pipe cannot be read again); 0, or 1 after the error. */
static int open_input(const opts *o, vt_st_file *f) {
    vt_err e = {0};
    if (!o->input) return missing("--input");
    return vt_st_open(o->input, f, &e) ? die("--input: %s", e.msg) : 0;
}

/* Reads `input` (B, C, H, W) from f (open_input of path) and checks it against cfg; returns the data and B. */
static float *read_input(const vt_model_cfg *cfg, vt_st_file *f, const char *path, int *B) {
    vt_err e = {0};
    float *x = NULL;
    const vt_st_entry *ie = vt_st_find(f, "input");
    char buf[sizeof e.msg + VT_PATH_BRIEF + 8], brief[VT_PATH_BRIEF]; /* the file's name leaves room for the cause */
    path = vt_path_brief(path, brief, sizeof brief);
    if (!ie) {
        snprintf(buf, sizeof buf, "%s: tensor 'input' not found in file", path);
        die("%s", buf);
        return NULL;
    }
    if (ie->dtype != VT_ST_F32 && ie->dtype != VT_ST_F16 && ie->dtype != VT_ST_BF16) {
        snprintf(buf, sizeof buf, "%s: tensor input has dtype %s; images must be F32 (or F16/BF16)", path,
                 vt_st_dtype_name(ie->dtype));
        die("%s", buf);
        return NULL;
    }
    const vt_arch_cfg *a = &cfg->arch;
    int H, W;
    vt_arch_input(a, &H, &W);
    /* the shape from the header, checked before the tensor is read: a file can declare more than memory holds */
    const int64_t *sh = ie->shape;
    if (ie->ndim != 4 || sh[0] < 1 || sh[0] > 1 << 16 || sh[1] != a->in_chans || sh[2] != H || sh[3] != W) {
        char dims[200] = "";
        for (int d = 0, n = 0; d < ie->ndim && n < (int)sizeof dims; d++)
            n += snprintf(dims + n, sizeof dims - (size_t)n, d ? ", %lld" : "%lld", (long long)sh[d]);
        snprintf(buf, sizeof buf, "%s: input has shape (%s) but %s expects (B, %d, %d, %d) with 1 <= B <= 65536; "
                 "see --img-size / --in-chans", path, dims, cfg->name, a->in_chans, H, W);
        die("%s", buf);
        return NULL;
    }
    int nd = 4;
    int64_t got[VT_ST_MAXDIM];
    if (vt_st_read_named(f, "input", &x, &nd, got, &e)) {
        snprintf(buf, sizeof buf, "%s: %s", path, e.msg);
        die("%s", buf);
        return NULL;
    }
    const int64_t bad = vt_first_nonfinite(x, sh[0] * sh[1] * sh[2] * sh[3]);
    if (bad >= 0) {
        const int64_t hw = sh[2] * sh[3], chw = sh[1] * hw;
        snprintf(buf, sizeof buf, "%s: input contains %s at image %lld, channel %lld, row %lld, column %lld "
                 "(0-based); inputs must be finite", path, isnan(x[bad]) ? "NaN" : "Inf", (long long)(bad / chw),
                 (long long)(bad % chw / hw), (long long)(bad % hw / sh[3]), (long long)(bad % sh[3]));
        die("%s", buf);
        vt_free(x);
        return NULL;
    }
    *B = (int)sh[0];
    return x;
}

/* The height and width of the 4-D `input` in f into h, w; 0 when there is none of at most 4096 a side (read_input
 * reports why). */
static int input_hw(const vt_st_file *f, int *h, int *w) {
    const vt_st_entry *t = vt_st_find(f, "input");
    if (!t || t->ndim != 4 || t->shape[2] < 1 || t->shape[2] > 4096 || t->shape[3] < 1 || t->shape[3] > 4096) return 0;
    *h = (int)t->shape[2];
    *w = (int)t->shape[3];
    return 1;
}

/* cfg (model_cfg's) at the size of the input in f when --img-size is not given (or only recorded by the weights), or
 * when the model resizes its position embeddings to its input (--img-size: the size its weights are made for): the
 * model's weights must fit any size, or be resized, or the input must have the model's size (a clear error
 * otherwise); H != W where the family's official code takes non-square inputs. */
static int fit_input_size(const opts *o, const vt_st_file *f, vt_model_cfg *cfg) {
    int h = 0, w = 0;
    vt_err e = {0};
    const vt_st_entry *t = vt_st_find(f, "input");
    const int from_input = !o->img_size || o->size_recorded || vt_model_resizes(cfg);
    if (from_input && (vt_model_any_size(cfg) || vt_model_resizes(cfg)) && t && t->ndim == 4 &&
        (t->shape[2] > 4096 || t->shape[3] > 4096)) { /* (read_input would blame the model's own size) */
        vt_seterr(&e, "%s: input has shape (%lld, %lld, %lld, %lld): image sides are at most 4096 pixels", o->input,
                  (long long)t->shape[0], (long long)t->shape[1], (long long)t->shape[2], (long long)t->shape[3]);
        return die("%s", e.msg);
    }
    if (from_input && input_hw(f, &h, &w) &&
        vt_model_at_size(cfg, h, w, cfg, &e))
        return die("%s", e.msg);
    return 0;
}

int cmd_forward(opts *o) {
    vt_model_cfg c;
    vt_st_file f = {0};
    const int mc = model_cfg(o, &c); /* 2: a malformed list option */
    if (mc) return mc;
    if (!o->weights) return missing("--weights");
    if (!o->output) return missing("--output");
    if (output_ok(o, 0)) return 1;
    const int ic = open_input(o, &f); /* 2: --input missing */
    if (ic) return ic;
    vt_params *P = fit_input_size(o, &f, &c) ? NULL : load_model(o, &c);
    if (!P) {
        vt_st_close(&f);
        return 1;
    }
    int B = 0, rc = 1;
    float *x = read_input(&c, &f, o->input, &B);
    vt_err e = {0};
    vt_predictor p = {0};
    if (x && vt_predictor_init(&p, &c, P, B, o->features ? VT_PRED_MAPS : VT_PRED_LOGITS, &e)) {
        die("%s", e.msg);
    } else if (x) {
        vt_predictor_forward(&p, x, B);
        warn_dtype_fallback(&c, vt_graph_dtype_use(p.g));
        vt_st_out out[VT_MAX_STAGES] = {
            {"logits", VT_ST_F32, 2, {B, c.arch.num_classes}, p.logits ? p.logits->data : NULL}};
        static const char *const fname[VT_MAX_STAGES] = {"features.0", "features.1", "features.2", "features.3"};
        for (int i = 0; i < p.nmaps; i++) {
            out[i] = (vt_st_out){fname[i], VT_ST_F32, 4, {0}, p.maps[i]->data};
            for (int d = 0; d < 4; d++) out[i].shape[d] = p.maps[i]->shape[d];
        }
        const int nout = o->features ? p.nmaps : 1;
        int bad = -1;
        for (int i = 0; i < nout && bad < 0; i++) {
            int64_t n = 1;
            for (int d = 0; d < out[i].ndim; d++) n *= out[i].shape[d];
            if (vt_first_nonfinite(out[i].data, n) >= 0) bad = i;
        }
        if (bad >= 0) /* under --dtype bf16 a finite value past bf16's largest (3.39e38) rounds to Inf too */
            die(c.arch.bf16 ? "%s came out NaN or Inf: the input or the weights overflow float32, or bfloat16 (whose "
                              "largest value is 3.39e38) under --dtype bf16, in the forward pass (nothing written)"
                            : "%s came out NaN or Inf: the input or the weights overflow float32 in the forward pass "
                              "(nothing written)", out[bad].name);
        else
            rc = vt_st_write(o->output, out, nout, NULL, &e) ? die("%s", e.msg) : 0;
    }
    vt_predictor_free(&p);
    vt_free(x);
    vt_st_close(&f);
    vt_params_free(P);
    return rc;
}

int cmd_grad(opts *o) {
    static const char *const adamw[] = {"--lr", "--weight-decay"};
    for (int i = 0; i < 2 && o->steps <= 1; i++)
        if (given(o, adamw[i]))
            return refuse("grad", "%s has no effect with --steps 1 (one forward/backward pass, no AdamW step): give "
                          "--steps N >= 2 for N-1 AdamW steps", adamw[i]);
    vt_model_cfg c;
    vt_st_file f = {0};
    const int mc = model_cfg(o, &c); /* 2: a malformed list option */
    if (mc) return mc;
    if (!o->weights) return missing("--weights");
    if (c.arch.int8) return refuse("grad", "--dtype int8 is for inference; take gradients in fp32 or bf16");
    if (!o->output) return missing("--output");
    if (output_ok(o, 0)) return 1;
    const int ic = open_input(o, &f); /* 2: --input missing */
    if (ic) return ic;
    vt_params *P = NULL;
    if (!fit_input_size(o, &f, &c)) {
        c = vt_model_training_form(&c); /* the weights are the training form's (cFFN BN branches) */
        P = load_model(o, &c);
    }
    if (!P) {
        vt_st_close(&f);
        return 1;
    }
    int B = 0, rc = 1, steps = o->steps > 0 ? o->steps : 1;
    float *x = read_input(&c, &f, o->input, &B), *labf = NULL, *losses = NULL;
    int32_t *lab = NULL;
    int64_t nl = 0;
    vt_err e = {0};
    char shortened[VT_PATH_BRIEF], buf[sizeof e.msg + VT_PATH_BRIEF + 8];
    const char *brief = vt_path_brief(o->input, shortened, sizeof shortened); /* the path itself when short */
    const vt_st_entry *le = vt_st_find(&f, "labels");
    const int counted = le && le->ndim == 1; /* the count from the header, checked before the labels are read */
    if (counted) nl = le->shape[0];
    if (x && (!counted || nl == B) && vt_st_read_labels(&f, "labels", &lab, &nl, &e)) {
        snprintf(buf, sizeof buf, "%s: %s", brief, e.msg);
        die("%s", buf);
    } else if (x && nl != B) {
        snprintf(buf, sizeof buf, "%s: labels must have shape (B,) matching the input batch (%d), not (%lld,)", brief,
                 B, (long long)nl);
        die("%s", buf);
    } else if (x) {
        labf = malloc(sizeof(float) * (size_t)B);
        losses = malloc(sizeof(float) * (size_t)steps);
        int ok = labf && losses;
        if (!ok) die("%s", "out of memory");
        for (int b = 0; ok && b < B; b++) labf[b] = (float)lab[b]; /* vt_grad_steps checks them */
        if (ok && (vt_grad_steps(&c, P, x, labf, B, steps, o->lr > 0 ? o->lr : 1e-3, o->wd >= 0 ? o->wd : 0.0, losses,
                                 &e) ||
                   vt_params_save_grads(P, o->output, losses, steps, &e)))
            die("%s", e.msg);
        else if (ok)
            rc = 0;
    }
    free(labf);
    free(losses);
    vt_free(lab);
    vt_free(x);
    vt_st_close(&f);
    vt_params_free(P);
    return rc;
}

/* The classes.json beside the training weights (a run folder's, naming the K classes) goes beside the deployed file
 * as its own OUT.classes.json, which predict, eval and the API take for it before a folder's classes.json: a folder of
 * deployed models from several runs keeps each one's names, and no other weights file there takes them. Without
 * one to copy, an OUT.classes.json of an earlier deploy to OUT is removed: it named the replaced weights' classes. */
static void deploy_classes(const opts *o, int K) {
    char src[4096], side[4096], **a = NULL;
    vt_err e = {0};
    const int named = vt_classes_sidecar(o->output, side, sizeof side) == 0;
    const int here = vt_classes_beside(o->weights, K, &a, src, sizeof src, &e);
    if (here < 0) notice("the classes.json beside %s is not copied: %s", o->weights, e.msg);
    if (here > 0) {
        vt_classes_free(a, K);
        if (named && vt_copy_file(src, side, &e) == 0) {
            printf("wrote %s (the class names of %s)\n", side, src);
            return;
        }
        notice("the class names were not copied beside %s: %s; predict with --classes %s", o->output, e.msg, src);
    }
    struct stat st;
    if (named && lstat(side, &st) == 0) {
        if (S_ISREG(st.st_mode) && unlink(side) == 0)
            notice("removed %s: it named the classes of the weights this deploy replaced", side);
        else
            notice("%s names the classes of the weights this deploy replaced, and was not removed (%s): predict and "
                   "eval would take its names for %s; remove it", side, S_ISREG(st.st_mode) ? strerror(errno) :
                   "not a regular file", o->output);
    }
}

/* Training-form weights -> deployed weights (the family's re-parameterisation merge, e.g. cFFN branches). */
int cmd_deploy(opts *o) {
    vt_model_cfg c;
    const int mc = model_cfg(o, &c); /* 2: a malformed list option */
    if (mc) return mc;
    if (!o->weights) return missing("--weights");
    if (!o->output) return missing("-o OUTPUT");
    if (output_ok(o, 1)) return 1; /* deploy_classes copies it */
    const vt_model_cfg t = vt_model_training_form(&c);
    vt_err ce = {0};
    if (o->wfile_open == 1 && vt_model_check_tensors(&t, &o->wfile, o->weights, &ce) != 0 &&
        vt_model_check_tensors(&c, &o->wfile, o->weights, &ce) == 0) /* (forms with one key set: the form record) */
        return die("%s holds the deployed form already (the merged tensors, no training branches): there is nothing "
                   "to deploy; it loads as it is", o->weights);
    const int no_form =
        o->wfile_open == 1 && (t.family->caps & VT_CAP_FORM_RECORD) && !vt_st_meta(&o->wfile, VT_FORM_KEY);
    c = t;
    vt_params *P = load_model(o, &c);
    if (!P) return 1;
    if (no_form) /* said once the file loaded as this model's weights (another model's file, a checkpoint: refused) */
        notice("%s records no form: taken as the training form, as official checkpoints are (a file saved after "
               "merge_bn would have its BatchNorms merged twice: convert such a checkpoint with convert_checkpoint.py "
               "--form deployed, and use it as it is)", o->weights);
    vt_err e = {0};
    vt_params *D = vt_params_new(&e);
    int rc = !D || vt_model_deploy(&c, P, D, &e) || vt_params_save(D, o->output, &e);
    if (rc)
        die("%s", e.msg);
    else
        printf("wrote %s: %lld deployed params of %s (from %lld training-form params)\n", o->output,
               (long long)vt_params_count(D, VT_PARAM), c.name, (long long)vt_params_count(P, VT_PARAM));
    if (rc == 0) deploy_classes(o, c.arch.num_classes);
    vt_params_free(D);
    vt_params_free(P);
    return rc;
}
