/* The commands that run a trained model on data: eval (a dataset's loss and accuracy), predict (image files' top-k
 * classes) and attention (pictures of the attention maps). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <strings.h>

#include "vitc/attention.h"
#include "vitc/fileio.h"
#include "vitc/imagefolder.h"
#include "vitc/model.h"
#include "vitc/predict.h"
#include "vitc/safetensors.h"
#include "vitc/train.h"
#include "vitc/weights.h"

#include "cli.h"

/* Class i's name: from --classes, else the model's dataset's unless weights P were trained on a folder (NULL: none). */
static const char *class_name(const opts *o, const vt_model_cfg *c, const vt_params *P, int i) {
    if (o->cls) return i >= 0 && i < o->ncls ? o->cls[i] : NULL;
    return vt_model_class_name(c, P, i);
}

/* Reads --classes (when given) into o->cls; its class count must be the model's (K). */
static int read_classes(opts *o, int K) {
    if (!o->classes) return 0;
    vt_err e = {0};
    if (vt_classes_read(o->classes, &o->cls, &o->ncls, &e)) return die("--classes: %s", e.msg);
    if (o->ncls != K) {
        fprintf(stderr, "vitc: %s names %d classes but the model has %d outputs: for weights of %d classes add "
                "--num-classes %d; else give the classes.json of the run that made these weights\n", o->classes,
                o->ncls, K, o->ncls, o->ncls);
        return 1;
    }
    return 0;
}

/* predict without --classes (and eval of a folder without train/, whose classes it would read): the classes.json
 * beside the weights (a run folder's, written by training on an image folder), said on stderr, when it names the
 * model's K classes; its names beat the model's dataset's, which a run on a folder does not share. */
static void classes_beside_weights(opts *o, int K) {
    if (o->classes || !o->weights) return;
    char path[4096], **names = NULL;
    vt_err e = {0};
    const int rc = vt_classes_beside(o->weights, K, &names, path, sizeof path, &e);
    if (rc < 0) notice("the classes.json beside the weights is not used: %s", e.msg);
    if (rc <= 0) return;
    notice("class names from %s (beside the weights; --classes picks another file)", path);
    o->cls = names;
    o->ncls = K;
}

/* eval of a folder with train/ labels images by that folder's class order: the run's classes.json beside the weights,
 * when there is one, must name the same classes in that order, or the labels would not be the model's outputs
 * (a silently wrong accuracy). 0, or 1 after the message. */
static int check_run_classes(const opts *o, const vt_data *d, const char *data, int K) {
    if (o->cls || !d->folder || !o->weights) return 0;
    char path[4096], **names = NULL;
    vt_err e = {0};
    const int rc = vt_classes_beside(o->weights, K, &names, path, sizeof path, &e);
    if (rc < 0) notice("the classes.json beside the weights is not checked against %s/train: %s", data, e.msg);
    if (rc <= 0) return 0;
    const vt_imagefolder *f = &d->f_train;
    int k = 0;
    while (k < K && k < f->nclasses && strcmp(names[k], f->classes[k]) == 0) k++;
    const int differ = k < K; /* the folder's class count is the model's (vt_data_open_eval checks it) */
    if (differ)
        say("eval", "%s/train's classes are not those of the weights: class %d is '%s' in %s/train and '%s' in %s; "
            "`--classes %s` scores %s/val by the weights' class names", data, k,
            k < f->nclasses ? f->classes[k] : "(none)", data, k < K ? names[k] : "(none)", path, path, data);
    vt_classes_free(names, K);
    return differ;
}

/* Prints (or, with --json, writes as one JSON line) one image's top-k classes. */
static void print_top(const opts *o, const vt_model_cfg *c, const vt_params *P, const char *path, const vt_topk *t) {
    const int names = class_name(o, c, P, 0) != NULL;
    if (o->json) {
        printf("{\"image\": ");
        json_str(path);
        printf(", \"top\": [");
    } else { /* a name with a newline or an escape sequence printed escaped: one line, nothing sent to the terminal */
        vt_fputs_clean(stdout, path);
        putchar('\n');
    }
    for (int i = 0; i < t->k; i++) {
        const char *nm = names ? class_name(o, c, P, t->cls[i]) : NULL;
        if (o->json) {
            printf("%s{\"class\": %d, ", i ? ", " : "", t->cls[i]);
            if (nm) {
                printf("\"name\": ");
                json_str(nm);
                printf(", ");
            }
            printf("\"prob\": %.6f}", t->prob[i]);
        } else {
            int cols = 0; /* the name's width on a terminal: its characters, not its UTF-8 bytes */
            for (const unsigned char *q = (const unsigned char *)(nm ? nm : ""); *q; q++) cols += (*q & 0xC0) != 0x80;
            printf("  %d. class %-5d %s%*s %7.3f%%\n", i + 1, t->cls[i], nm ? nm : "", cols < 12 ? 12 - cols : 0, "",
                   100.0 * t->prob[i]);
        }
    }
    if (o->json) printf("]}\n");
}

int cmd_eval(opts *o) {
    const char *data = o->data ? o->data : "fashion-mnist";
    if (o->classes && strcmp(data, "fashion-mnist") == 0)
        return refuse("eval", "--classes checks an image folder's classes (--data DIR); fashion-mnist has its own ten");
    vt_model_cfg c;
    const int mc = model_cfg(o, &c); /* 2: a malformed list option */
    if (mc) return mc;
    if (!o->weights) return missing("--weights");
    vt_data d;
    vt_err e = {0};
    if (read_classes(o, c.arch.num_classes)) return 1;
    char train[4096];
    struct stat st;
    if (strcmp(data, "fashion-mnist") != 0 && snprintf(train, sizeof train, "%s/train", data) < (int)sizeof train &&
        stat(data, &st) == 0 && S_ISDIR(st.st_mode) && stat(train, &st) != 0)
        classes_beside_weights(o, c.arch.num_classes); /* a validation folder alone: the run's classes */
    /* with --classes the folder's val/ classes are scored by name against them, and no train/ is needed */
    if (vt_data_open_eval(&c, data, o->cls, o->ncls, o->test_subset, &d, &e)) return die("%s", e.msg);
    if (d.folder && d.f_val.unread > 0)
        notice("%d files of %s/val left out: .tif, .tiff and .webp images, which torchvision's ImageFolder reads, vitc "
               "does not decode", d.f_val.unread, data);
    if (check_run_classes(o, &d, data, c.arch.num_classes)) {
        vt_data_close(&d);
        return 1;
    }
    if (o->test_subset > d.val.n)
        notice("--test-subset %d is more than the %d test images: evaluating all of them", o->test_subset, d.val.n);
    vt_params *P = load_model(o, &c);
    if (!P) {
        vt_data_close(&d);
        return 1;
    }
    vt_eval_result r = {0}, rf = {0}; /* rf: the fp32 run a bf16 or int8 evaluation is compared with */
    const int B = o->batch > 0 ? o->batch : 250;
    vt_model_cfg cf = c;
    cf.arch.int8 = cf.arch.bf16 = 0;
    int rc = 0, agree = 0;
    const char *low = c.arch.int8 ? "int8" : c.arch.bf16 ? "bf16" : NULL; /* the lower precision asked for */
    if (low &&
        (!(rf.top1 = malloc(sizeof(int) * (size_t)d.val.n)) || !(r.top1 = malloc(sizeof(int) * (size_t)d.val.n))))
        rc = vt_seterr(&e, "out of memory");
    if (rc == 0) rc = vt_evaluate(&c, P, &d.val, &d.eval_tf, B, o->workers, NULL, &r, stderr, &e);
    const vt_dtype_use use = {r.linears, r.int8_linears, r.bf16_runs};
    const int q = rc == 0 && low && !warn_dtype_fallback(&c, use); /* compared with fp32 */
    if (rc == 0 && q) rc = vt_evaluate(&cf, P, &d.val, &d.eval_tf, B, o->workers, NULL, &rf, stderr, &e);
    for (int i = 0; rc == 0 && q && i < d.val.n; i++) agree += r.top1[i] >= 0 && r.top1[i] == rf.top1[i];
    const char *what = d.folder ? "validation" : "Fashion-MNIST test";
    const char *dtype = dtype_label(&c, q);
    if (rc)
        die("%s", e.msg);
    else if (o->json) {
        printf("{\"model\": \"%s\", \"dtype\": \"%s\", \"images\": %d, \"skipped\": %lld, \"loss\": %.6f, "
               "\"acc1\": %.4f, \"acc5\": %.4f", c.name, dtype, r.n, (long long)r.skipped, r.loss, 100 * r.acc1,
               100 * r.acc5);
        if (c.arch.int8) printf(", \"linears\": %d, \"int8_linears\": %d", use.linears, use.int8);
        if (q) printf(", \"fp32_acc1\": %.4f, \"top1_agreement\": %.4f", 100 * rf.acc1, 100.0 * agree / r.n);
        printf("}\n");
    } else {
        printf("%s%s on %s%s%s (%d image%s%s): loss %.4f, top-1 accuracy %.2f%%, top-5 accuracy %.2f%%\n", c.name,
               !q   ? c.arch.int8   ? " (fp32: int8 requested, no layer ran int8)"
                      : c.arch.bf16 ? " (fp32: bf16 requested, no product ran bf16)"
                                    : ""
               : c.arch.int8 ? " (int8)"
                             : " (bf16)",
               what,
               d.folder ? " " : "", d.folder ? data : "", r.n, r.n == 1 ? "" : "s",
               r.skipped ? ", unreadable ones skipped" : "", r.loss,
               100 * r.acc1, 100 * r.acc5);
        if (q)
            printf("fp32: top-1 accuracy %.2f%% (%s %+.2f points); top-1 agreement of %s with fp32: %.2f%% (%d of %d)",
                   100 * rf.acc1, low, 100 * (r.acc1 - rf.acc1), low, 100.0 * agree / r.n, agree, r.n);
        if (q && c.arch.int8) printf("; %d of %d linear layers ran int8", use.int8, use.linears);
        if (q) printf("\n");
    }
    if (rc == 0 && r.skipped) fprintf(stderr, "vitc: %lld unreadable images skipped\n", (long long)r.skipped);
    free(r.top1);
    free(rf.top1);
    vt_data_close(&d);
    vt_params_free(P);
    return rc ? 1 : 0;
}

/* Top-k classes of image files, preprocessed like the model's pretrained cfg (timm eval transform). */
int cmd_predict(opts *o) {
    vt_model_cfg c;
    const int mc = model_cfg(o, &c); /* 2: a malformed list option */
    if (mc) return mc;
    if (!o->weights) return missing("--weights");
    if (o->nimages < 1) return missing_images();
    if (o->output && output_ok(o, 1)) return 1; /* (classes_beside_weights reads it) */
    if (read_classes(o, c.arch.num_classes)) return 1;
    classes_beside_weights(o, c.arch.num_classes);
    const int n = o->nimages, K = c.arch.num_classes, k = o->topk > 0 ? o->topk : 5;
    if (k > VT_MAX_TOPK && K > VT_MAX_TOPK) /* a model of up to 64 classes lists them all */
        return refuse("predict", "--topk %d: at most %d classes are listed per image (%s has %d)", k, VT_MAX_TOPK,
                      c.name, K);
    if (k > K && o->topk > 0) /* the default 5 lists a smaller model's classes without a word */
        notice("--topk %d is more than the %d classes of %s: listing %d", k, K, c.name, K);
    const int64_t per = (int64_t)c.arch.in_chans * c.arch.img_size * vt_arch_width(&c.arch);
    vt_prediction *res = calloc((size_t)n, sizeof *res);
    float *keep = NULL; /* --output: every image's input, then every image's logits */
    vt_err e = {0};
    if (!res || (o->output && !(keep = vt_alloc(sizeof(float) * (size_t)n * (size_t)(per + K), &e)))) {
        free(res);
        return die("%s", "out of memory");
    }
    vt_params *P = load_model(o, &c);
    if (P && P->folder && !o->cls)
        notice("%s was trained on an image folder (metadata %s) and no classes.json names its classes (beside it, or "
               "--classes RUN/classes.json): classes are shown by number", o->weights, VT_DATA_KEY);
    vt_dtype_use use = {0, 0, 0};
    int bad = P ? vt_predict_files(&c, P, o->images, n, o->batch > 0 ? o->batch : 16, k, res, keep,
                                   keep ? keep + n * per : NULL, &use, stderr, &e)
                : -1;
    int rc = bad != 0;
    if (bad < 0 && P) die("%s", e.msg);
    if (bad >= 0) warn_dtype_fallback(&c, use);
    for (int i = 0; bad >= 0 && i < n; i++) {
        if (res[i].ok) {
            print_top(o, &c, P, o->images[i], &res[i].top);
            continue;
        }
        if (o->json) {
            printf("{\"image\": ");
            json_str(o->images[i]);
            printf(", \"error\": ");
            json_str(res[i].err.msg);
            printf("}\n");
        }
        die("%s", res[i].err.msg); /* its file's name escaped (the count of failures is returned below) */
    }
    if (bad > 0 && keep) {
        die("%s", "--output not written: some images failed (above)");
    } else if (bad == 0 && keep) {
        const int64_t iw = vt_arch_width(&c.arch);
        vt_st_out out[2] = {{"input", VT_ST_F32, 4, {n, c.arch.in_chans, c.arch.img_size, iw}, keep},
                            {"logits", VT_ST_F32, 2, {n, K}, keep + n * per}};
        if (vt_st_write(o->output, out, 2, NULL, &e)) rc = die("%s", e.msg);
    }
    vt_free(keep);
    free(res);
    vt_params_free(P);
    return rc;
}

/* vt_parse_index_list of the list s (what: its option, in messages) into out (at most max); -1 after the message. */
static int index_list(const char *what, const char *s, int *out, int max) {
    vt_err e = {0};
    const int n = vt_parse_index_list(s, what, out, max, &e);
    return n >= 0 ? n : die("%s", e.msg) * -1;
}

/* attention, whose --heads picks the heads to draw: the head counts per stage the weights record (their vitc_heads
 * metadata, as run) in the form --heads takes for building c (halved on the stages --double-heads doubles), into
 * list (n bytes); 1 when they differ from c's, 0 when they do not or none are recorded, -1 when the record is not one
 * count per stage. */
static int recorded_heads(const vt_model_cfg *c, const vt_st_file *f, char *list, size_t n) {
    const char *rec = vt_st_meta(f, VT_HEADS_KEY);
    char have[64];
    vt_model_heads(c, have, sizeof have);
    size_t len = 0;
    const char *p = rec && strcmp(rec, have) != 0 ? rec : "";
    int i = 0;
    list[0] = '\0';
    for (; *p && i < c->arch.nstages && len < n; i++) {
        char *end = NULL;
        errno = 0;
        const long h = strtol(p, &end, 10);
        if (end == p || errno || h < 1 || h > 4096 || (*end && *end != ',')) break;
        const int dbl = c->arch.opts.double_heads && strcmp(c->arch.stages[i].attn, "hmhsa") == 0;
        len += (size_t)snprintf(list + len, n - len, "%s%ld", i ? "," : "", dbl ? h / 2 : h);
        p = *end == ',' ? end + 1 : end;
    }
    if (*p || (list[0] && i != c->arch.nstages)) return -1;
    return list[0] != '\0';
}

/* attention's architecture heads came from the --weights file (its options record or its heads record, list): an
 * error they cause is the file's (model_cfg's options_error). */
static void heads_recorded_in(opts *o, const char *list) {
    const size_t k = (size_t)(find_option("--heads") - optdefs);
    o->given[k] = o->recorded[k] = 1;
    if (strstr(o->record_text, "--heads")) return;
    const size_t n = strlen(o->record_text);
    snprintf(o->record_path, sizeof o->record_path, "%s", o->weights);
    snprintf(o->record_text + n, sizeof o->record_text - n, "%s--heads %s", n ? " " : "", list);
}

/* The model of `attention`: c rebuilt with the heads the weights f record where they differ, or already built with
 * them from the options record (said on stderr either way: the tensors of some hosts, Swin's relative-position tables,
 * hMHSA's maps, have shapes that depend on the heads), its tensors then checked against f; 0, or an exit status after
 * the message. */
static int model_of_weights(opts *o, vt_model_cfg *c, const vt_st_file *f) {
    vt_err e = {0};
    char list[sizeof o->arch_heads];
    const int hr = recorded_heads(c, f, list, sizeof list);
    if (hr > 0 || (hr == 0 && o->arch_heads[0] && o->heads == o->arch_heads && vt_st_meta(f, VT_HEADS_KEY)))
        notice("%s records %s attention heads per stage (as run): the model is built with them", o->weights,
               vt_st_meta(f, VT_HEADS_KEY));
    if (hr > 0) {
        snprintf(o->arch_heads, sizeof o->arch_heads, "%s", list);
        o->heads = o->arch_heads;
        heads_recorded_in(o, list);
        const int mc = model_cfg(o, c);
        if (mc) return mc;
    }
    if (vt_model_check_tensors(c, f, o->weights, &e)) return die("%s", e.msg);
    if (!vt_st_meta(f, VT_HEADS_KEY)) { /* converted checkpoints: their heads are the named model's, unless changed */
        char have[64];
        vt_model_heads(c, have, sizeof have);
        notice("%s records no attention heads (%s): the maps are split into %s heads per stage, as the model is "
               "built", o->weights, VT_HEADS_KEY, have);
    }
    if (hr < 0) { /* the tensors fit the model: the record does not */
        char msg[600];
        snprintf(msg, sizeof msg, "%s: its %s metadata \"%.60s\" is not one head count per stage of %s's %d stage%s: "
                 "not a file vitc wrote", o->weights, VT_HEADS_KEY, vt_st_meta(f, VT_HEADS_KEY), c->name,
                 c->arch.nstages, c->arch.nstages == 1 ? "" : "s");
        return die("%s", msg);
    }
    return 0;
}

int cmd_attention(opts *o) {
    vt_attn_viz_opts ao = {.png = o->output, .save_maps = o->save_maps, .rollout = o->rollout, .progress = stderr,
                           .notes = stderr};
    vt_err e = {0};
    const char *heads = o->heads;
    o->heads = o->arch_heads[0] ? o->arch_heads : NULL; /* --heads selects the heads to draw here: the architecture's
                                                           * are the weights' (their options record) */
    if (o->heads) heads_recorded_in(o, o->arch_heads);
    if (heads && strcmp(heads, "mean") == 0)
        ao.head_mean = 1;
    else if (heads && strcmp(heads, "all") != 0 &&
             (ao.nheads = index_list("--heads (all, mean or indices)", heads, ao.heads,
                                     VT_ATTN_MAX_SEL)) < 0)
        return 2; /* malformed: a usage error */
    if (o->blocks && (ao.nblocks = index_list("--blocks", o->blocks, ao.blocks, VT_ATTN_MAX_SEL)) < 0)
        return 2;
    vt_model_cfg c;
    int mc = model_cfg(o, &c); /* 2: a malformed list option */
    if (mc) return mc;
    if (!o->weights) return missing("--weights");
    if (o->nimages < 1) return missing_images();
    if (!o->output && !o->save_maps) return missing("-o OUT.png (or --save-maps MAPS.safetensors)");
    if (heads && !o->output) /* --save-maps keeps every head */
        return refuse("attention", "--heads picks the heads drawn in the picture (-o); --save-maps keeps every head, "
                      "so without -o it can have no effect");
    const size_t len = o->output ? strlen(o->output) : 0;
    if (o->output && (len < 4 || strcasecmp(o->output + len - 4, ".png") != 0))
        return refuse("attention", "-o %s: the picture is written as PNG; give a name ending in .png", o->output);
    const char *fixed[1] = {o->weights};
    if ((o->output && vt_output_check(o->output, fixed, 1, &e)) ||
        (o->save_maps && vt_output_check(o->save_maps, fixed, 1, &e)))
        return die("%s", e.msg);
    if (o->output) remove_stale_temps_beside(o->output);
    if (o->save_maps) remove_stale_temps_beside(o->save_maps);
    /* read once (weights_options): its tensors against the model, its recorded heads, then its values */
    if (o->wfile_open < 0 || (!o->wfile_open && vt_st_open(o->weights, &o->wfile, &o->werr)))
        return die("--weights: %s", o->werr.msg);
    o->wfile_open = 1;
    vt_params *P = NULL;
    if (!(mc = model_of_weights(o, &c, &o->wfile)) && !(P = load_model(o, &c))) mc = 1;
    close_weights(o);
    if (mc) return mc;
    const int rc = vt_attention_pictures(&c, P, o->images, o->nimages, &ao, &e);
    vt_params_free(P);
    if (rc) return e.code == VT_E_USAGE ? refuse("attention", "%s", e.msg) : die("%s", e.msg); /* 2: the selection */
    if (o->output) printf("wrote %s\n", o->output);
    if (o->save_maps) printf("wrote %s\n", o->save_maps);
    return 0;
}
