/* The data sets of training and evaluation (vt_data_open, vt_data_open_eval, vt_data_close): Fashion-MNIST in
 * memory or an image folder read on demand, with subsets spread over a folder's classes, as sample sources with their
 * transforms (crop + flip, a recipe's DeiT transform, the model's eval transform); and the check, before a run
 * trains, that some of a folder's training and validation images can be read (check_readable). */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "trainer.h"
#include "vitc/augment.h"
#include "vitc/predict.h"
#include "vitc/train.h"

void vt_data_close(vt_data *d) {
    vt_dataset_free(&d->fm_train);
    vt_dataset_free(&d->fm_val);
    vt_imagefolder_free(&d->f_train);
    vt_imagefolder_free(&d->f_val);
    memset(d, 0, sizeof *d);
}

/* Keeps k samples of a folder split spread evenly over it, sample ⌊i·n/k⌋ for i < k, in order: a split lists its
 * files class by class, so its first k would hold the first classes only. */
static void folder_subset(vt_imagefolder *f, int k) {
    const int n = f->n;
    if (k >= n) return;
    int w = 0;
    for (int j = 0; j < n; j++)
        if (w < k && j == (int)((int64_t)w * n / k)) {
            f->paths[w] = f->paths[j];
            f->labels[w++] = f->labels[j];
        } else {
            free(f->paths[j]);
        }
    f->n = k;
}

/* Image folders are decoded to 1 (L) or 3 (RGB) channels: refuses a model taking others. */
static int folder_chans(const vt_model_cfg *c, vt_err *e) {
    const int C = c->arch.in_chans;
    if (C != 1 && C != 3)
        return vt_seterr(e, "%s takes %d input channels; image folders are read as 1 (L) or 3 (RGB)", c->name, C);
    return 0;
}

int vt_data_open(const vt_model_cfg *c, const char *data, int train, int augment, const vt_tf_params *deit,
                 int train_subset, int val_subset, vt_data *d, vt_err *e) {
    memset(d, 0, sizeof *d);
    const int S = c->arch.img_size, Wd = vt_arch_width(&c->arch), C = c->arch.in_chans, K = c->arch.num_classes;
    if (!data || !data[0]) return vt_seterr(e, "empty --data (fashion-mnist or an image folder)");
    d->pre = vt_model_preprocess(c);
    if (strcmp(data, "fashion-mnist") == 0) {
        if (C != 1 || S != 28 || Wd != 28)
            return vt_seterr(e, "%s takes %d×%d×%d inputs; Fashion-MNIST needs --img-size 28 --in-chans 1", c->name,
                             C, S, Wd);
        if (K != 10) return vt_seterr(e, "Fashion-MNIST has 10 classes (use --num-classes 10)");
        if ((train && vt_dataset_load_fmnist(NULL, 1, &d->fm_train, e)) ||
            vt_dataset_load_fmnist(NULL, 0, &d->fm_val, e) ||
            (train && train_subset > 0 && vt_dataset_subset(&d->fm_train, train_subset, e)) ||
            (val_subset > 0 && vt_dataset_subset(&d->fm_val, val_subset, e))) {
            vt_data_close(d);
            return -1;
        }
        d->train = vt_source_dataset(&d->fm_train);
        d->val = vt_source_dataset(&d->fm_val);
    } else {
        if (folder_chans(c, e)) return -1;
        struct stat st;
        if (stat(data, &st) != 0 && errno != ENOENT && errno != ENOTDIR) /* there, but the system refuses it */
            return vt_seterr_code(e, VT_E_IO, "cannot open the image folder %s: %s", data, strerror(errno));
        if (stat(data, &st) != 0 || !S_ISDIR(st.st_mode))
            return vt_seterr(e, "unknown dataset '%s': neither fashion-mnist nor an image folder (no folder %s holding "
                             "train/<class>/<image> and val/<class>/<image>)", data, data);
        if (vt_imagefolder_open(data, &d->f_train, &d->f_val, e)) return -1;
        if (train && d->f_train.nclasses == 1) { /* a softmax over one class is 1 whatever the weights: nothing to learn */
            vt_seterr(e, "%s/train has one class folder (%s): training a classifier needs two or more "
                      "(train/<class>/<image>)", data, d->f_train.classes[0]);
            vt_data_close(d);
            return -1;
        }
        if (d->f_train.nclasses != K) {
            if (train)
                vt_seterr(e, "%s/train has %d classes but %s has %d outputs: use --num-classes %d", data,
                          d->f_train.nclasses, c->name, K, d->f_train.nclasses);
            else /* eval labels val/ by train/'s class order: other classes than the weights' cannot be scored so */
                vt_seterr(e, "%s/train has %d classes but %s has %d outputs: for weights of other classes, "
                          "`--classes RUN/classes.json` (the run that made them) scores %s/val by class name; for "
                          "weights of %d classes that record no class count, --num-classes %d", data,
                          d->f_train.nclasses, c->name, K, data, d->f_train.nclasses, d->f_train.nclasses);
            vt_data_close(d);
            return -1;
        }
        d->folder = 1;
        if (train_subset > 0) folder_subset(&d->f_train, train_subset);
        if (val_subset > 0) folder_subset(&d->f_val, val_subset);
        d->train = vt_source_imagefolder(&d->f_train);
        d->val = vt_source_imagefolder(&d->f_val);
    }
    /* training: shorter side to S, random crop S with padding S/7 (4 at 28, Fashion-MNIST's), flip (H×W: scaled to
     * cover H×W, padding min(H, W)/7); eval, and training without augmentation: the model's pretrained eval transform
     * (as `vitc predict`) */
    d->crop = (vt_crop_flip){S, C, (S < Wd ? S : Wd) / 7, 1, {0}, {0}, Wd};
    for (int ch = 0; ch < 3; ch++) {
        d->crop.mean[ch] = d->pre.mean[ch];
        d->crop.std[ch] = d->pre.std[ch];
    }
    d->train_tf = augment ? vt_transform_crop_flip(&d->crop) : vt_transform_eval(&d->pre);
    if (augment && deit && d->folder) { /* the model's normalisation; geometric ops fill with its mean colour */
        d->deit = *deit;
        d->deit.size = S;
        d->deit.width = Wd;
        for (int ch = 0; ch < 3; ch++) {
            d->deit.mean[ch] = d->pre.mean[ch];
            d->deit.std[ch] = d->pre.std[ch];
            d->deit.fill[ch] = (unsigned char)lrintf(255.0f * d->pre.mean[ch]);
        }
        if (vt_tf_params_check(&d->deit, e)) {
            vt_data_close(d);
            return -1;
        }
        d->deit_on = 1;
        d->train_tf = vt_transform_deit(&d->deit, C);
    }
    d->eval_tf = vt_transform_eval(&d->pre);
    return 0;
}

int vt_data_open_eval(const vt_model_cfg *c, const char *data, char *const *classes, int nclasses, int val_subset,
                      vt_data *d, vt_err *e) {
    if (!classes || !data || strcmp(data, "fashion-mnist") == 0)
        return vt_data_open(c, data, 0, 0, NULL, 0, val_subset, d, e);
    memset(d, 0, sizeof *d);
    const int K = c->arch.num_classes;
    if (folder_chans(c, e)) return -1;
    if (nclasses != K)
        return vt_seterr(e, "%d class names given but %s has %d outputs", nclasses, c->name, K);
    struct stat st;
    char val[4096];
    if (snprintf(val, sizeof val, "%s/val", data) >= (int)sizeof val) return vt_seterr(e, "folder name too long");
    if (stat(val, &st) != 0 || !S_ISDIR(st.st_mode))
        return vt_seterr(e, "image folder %s has no val/ folder (expected %s/val/<class>/<image>)", data, data);
    vt_imagefolder *names = &d->f_train; /* the class list alone: no training images */
    names->classes = calloc((size_t)nclasses, sizeof(char *));
    int rc = names->classes ? 0 : vt_seterr_code(e, VT_E_NOMEM, "out of memory");
    for (int k = 0; rc == 0 && k < nclasses; k++, names->nclasses++)
        if (!(names->classes[k] = strdup(classes[k]))) rc = vt_seterr_code(e, VT_E_NOMEM, "out of memory");
    if (rc == 0) rc = vt_imagefolder_scan(val, names, &d->f_val, e);
    if (rc) {
        vt_data_close(d);
        return -1;
    }
    d->folder = 1;
    if (val_subset > 0) folder_subset(&d->f_val, val_subset);
    d->train = vt_source_imagefolder(&d->f_train);
    d->val = vt_source_imagefolder(&d->f_val);
    d->pre = vt_model_preprocess(c);
    d->train_tf = d->eval_tf = vt_transform_eval(&d->pre);
    return 0;
}

/* 0 when some image of src can be read (tried in order up to the first that decodes); else -1 naming the first's
 * error, the split (what) and the folder. */
static int some_readable(const vt_source *src, int chans, const char *what, const char *data, vt_err *e) {
    vt_err first = {0};
    for (int i = 0; i < src->n; i++) {
        vt_image img;
        int label;
        vt_err ie = {0};
        if (src->get(src->ctx, i, chans, 0, &img, &label, &ie) == 0) {
            vt_image_free(&img);
            return 0;
        }
        if (i == 0) first = ie;
    }
    return vt_seterr(e, "none of the %d %s images of %s can be read (the first: %s)", src->n, what, data, first.msg);
}

/* An image folder whose training or validation images are all unreadable is refused before the run folder is made
 * (the first batch or the first epoch's end would find it, the run folder written by then). */
int check_readable(const vt_data *d, int chans, const char *data, vt_err *e) {
    if (!d->folder) return 0;
    return some_readable(&d->train, chans, "training", data, e) || some_readable(&d->val, chans, "validation", data, e)
               ? -1
               : 0;
}
