/* Checkpoints and the run folder of the training loop (trainer.c): the settings a run records in its checkpoints,
 * checkpoint writes and their checked reads, resuming a run (its rank count, epochs, optimiser steps, settings and
 * classes checked against this run's), the folder's lock and a killed run's temporary files, the checks that a folder
 * may take a run (another run's history, a folder inside the data), making it, and the files a run there replaces
 * (an earlier run's) or records (command.txt). */
#define _XOPEN_SOURCE 700 /* realpath */
#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cJSON.h>

#include "trainer.h"
#include "vitc/fileio.h"
#include "vitc/optim.h"
#include "vitc/recipe.h"
#include "vitc/safetensors.h"
#include "vitc/train.h"
#include "vitc/weights.h"

/* The model EMA's tensors are stored in checkpoints as "ema/<name>". */
#define EMA_PREFIX "ema/"
#define FILES_KEY "train-files" /* checkpoint metadata: the digest of an image folder run's training images */

/* st's digest of its training images as the checkpoint records it (FILES_KEY): 16 hex digits into buf (17 bytes). */
static void files_text(const train_state *st, char *buf) {
    snprintf(buf, 17, "%016llx", (unsigned long long)st->files);
}

/* The checkpoint's name of parameter `name`'s EMA tensor (buf: VT_NAMELEN bytes): EMA_PREFIX and the name, cut to fit a
 * tensor name, the same when saved and when resumed. */
static void ema_key(char *buf, const char *name) {
    snprintf(buf, VT_NAMELEN, EMA_PREFIX "%.*s", VT_NAMELEN - 1 - (int)strlen(EMA_PREFIX), name);
}

/* How run o's learning rate moves (its recipe's, recorded so that a resume under another recipe says so). */
static const char *lr_update_text(const vt_train_opts *o) {
    static const char *const t[2][3] = {
        {"per step", "per epoch", "per epoch (DeiT's lag)"},
        {"per step, cosine after the warm-up", "per epoch, cosine after the warm-up",
         "per epoch (DeiT's lag), cosine after the warm-up"}};
    const int u = o->sched_update >= 0 && o->sched_update <= 2 ? o->sched_update : 0;
    return t[o->warmup_prefix != 0][u];
}

/* The settings of run o of model c (the training form) over `images` training images that change its numbers;
 * returns their count. */
int run_settings(const vt_model_cfg *c, const vt_train_opts *o, int64_t images, run_setting *s) {
    const struct { const char *key; double v; int steps; } num[] = {
        {"train-images", (double)images, 1},
        {"batch-size", o->batch, 1}, {"accum-steps", o->accum_steps > 0 ? o->accum_steps : 1, 1},
        {"train-subset", o->train_subset, 1}, {"repeated-aug", o->repeated_aug, 1}, {"epochs", o->epochs, 0},
        {"test-subset", o->test_subset, 0}, {"cooldown-epochs", o->cooldown_epochs > 0 ? o->cooldown_epochs : 0, 0},
        {"seed", (double)o->seed, 0}, {"lr", o->lr, 0}, {"min-lr", o->min_lr, 0}, {"warmup-lr", o->warmup_lr, 0},
        {"warmup-epochs", o->warmup_epochs, 0}, {"weight-decay", o->weight_decay, 0}, {"smoothing", o->smoothing, 0},
        {"clip-grad", o->clip_grad, 0}, {"augment", o->augment, 0}, {"mixup", o->mixup.mixup_alpha, 0},
        {"cutmix", o->mixup.cutmix_alpha, 0}, {"mixup-prob", o->mixup.prob, 0},
        {"mixup-switch-prob", o->mixup.switch_prob, 0}, {"model-ema", o->model_ema != 0, 0},
        {"model-ema-decay", o->model_ema ? o->model_ema_decay : 0, 0}, {"drop-path", c->arch.drop_path, 0},
        {"cos-reg", c->arch.cos_reg, 0}, {"sync-bn", o->sync_bn != 0, 0}};
    _Static_assert(sizeof num / sizeof *num + 4 <= RUN_SETTINGS, "run_setting array too small");
    int n = 0;
    s[n++] = (run_setting){"data", o->data, {0}, 1};
    s[n++] = (run_setting){"recipe", o->recipe ? o->recipe->name : "none", {0}, 0};
    s[n++] = (run_setting){"lr-update", lr_update_text(o), {0}, 0};
    s[n++] = (run_setting){"model-options", o->model_options ? o->model_options : "", {0}, 0};
    for (size_t i = 0; i < sizeof num / sizeof *num; i++, n++) {
        s[n] = (run_setting){num[i].key, NULL, {0}, num[i].steps};
        if (strcmp(num[i].key, "seed") == 0) /* a 64-bit seed is not a double */
            snprintf(s[n].num, sizeof s[n].num, "%llu", (unsigned long long)o->seed);
        else
            snprintf(s[n].num, sizeof s[n].num, "%.17g", num[i].v);
    }
    return n;
}

/* The metadata keys of a checkpoint written mid-epoch: train_state's part_steps, part_correct, part_skipped,
 * part_loss and part_seconds, in that order. */
static const char *const part_keys[5] = {"part_steps", "part_correct", "part_skipped", "part_loss", "part_seconds"};

/* The metadata of a checkpoint of run o at st: the model, the format, the rank count, the best epoch and its top-1,
 * the part of an epoch trained (a run stopped mid-epoch), the heads and windows P runs (as weight files record them,
 * checked on resume), and the run's settings, as JSON (malloc'd; NULL when out of memory). */
static char *checkpoint_metadata(const vt_model_cfg *c, const vt_train_opts *o, const vt_params *P,
                                 const train_state *st, int world_size) {
    run_setting s[RUN_SETTINGS];
    const int n = run_settings(c, o, st->images, s);
    cJSON *m = cJSON_CreateObject();
    char w[16], be[24], ba[32];
    snprintf(w, sizeof w, "%d", world_size);
    snprintf(be, sizeof be, "%lld", (long long)st->best_epoch);
    snprintf(ba, sizeof ba, "%.17g", st->best_acc1);
    int ok = m && cJSON_AddStringToObject(m, "model", c->name) && cJSON_AddStringToObject(m, "format", "vitc-checkpoint")
             && cJSON_AddStringToObject(m, "world_size", w) && cJSON_AddStringToObject(m, "best_epoch", be) &&
             cJSON_AddStringToObject(m, "best_acc1", ba);
    if (ok && P->heads[0]) ok = cJSON_AddStringToObject(m, VT_HEADS_KEY, P->heads) != NULL;
    if (ok && P->windows[0]) ok = cJSON_AddStringToObject(m, VT_WINDOWS_KEY, P->windows) != NULL;
    if (ok && P->attn[0]) ok = cJSON_AddStringToObject(m, VT_ATTN_KEY, P->attn) != NULL;
    if (ok && P->folder) ok = cJSON_AddStringToObject(m, VT_DATA_KEY, "folder") != NULL;
    char files[17];
    files_text(st, files);
    if (ok && st->files) ok = cJSON_AddStringToObject(m, FILES_KEY, files) != NULL;
    for (int i = 0; ok && i < n; i++) ok = cJSON_AddStringToObject(m, s[i].key, setting_value(&s[i])) != NULL;
    if (st->part_steps > 0) { /* a run stopped mid-epoch: what its epoch's record needs of the part trained */
        char part[5][32];
        snprintf(part[0], sizeof part[0], "%lld", (long long)st->part_steps);
        snprintf(part[1], sizeof part[1], "%lld", (long long)st->part_correct);
        snprintf(part[2], sizeof part[2], "%lld", (long long)st->part_skipped);
        snprintf(part[3], sizeof part[3], "%.17g", st->part_loss);
        snprintf(part[4], sizeof part[4], "%.17g", st->part_seconds);
        for (int i = 0; ok && i < 5; i++) ok = cJSON_AddStringToObject(m, part_keys[i], part[i]) != NULL;
    }
    char *txt = ok ? cJSON_PrintUnformatted(m) : NULL;
    cJSON_Delete(m);
    return txt;
}

int save_checkpoint(const char *path, const vt_model_cfg *c, const vt_train_opts *o, vt_params *P,
                    const vt_adamw *opt, const vt_params *ema, const train_state *st, int world_size,
                    vt_err *e) {
    const int ne = ema ? ema->n : 0;
    int n = P->n + ne + vt_adamw_nstate(opt) + 3, k = 0, rc = 0;
    vt_st_out *out = calloc((size_t)n, sizeof *out);
    char(*names)[VT_NAMELEN] = calloc((size_t)n, VT_NAMELEN);
    int64_t **i64 = calloc((size_t)(P->n + ne), sizeof *i64); /* integer buffers as files store them */
    if (!out || !names || !i64) {
        free(out);
        free(names);
        free(i64);
        return vt_seterr_code(e, VT_E_NOMEM, "out of memory writing a checkpoint");
    }
    for (int i = 0; rc == 0 && i < P->n + ne; i++, k++) { /* the model, then its EMA (ema/<name>) */
        const vt_tensor *t = i < P->n ? P->t[i] : ema->t[i - P->n];
        if (i < P->n) {
            out[k].name = t->name;
        } else {
            ema_key(names[k], t->name);
            out[k].name = names[k];
        }
        out[k].ndim = t->ndim;
        for (int d = 0; d < t->ndim; d++) out[k].shape[d] = t->shape[d];
        if (t->is_i64) {
            rc = (i64[i] = vt_param_i64(t, path, e)) ? 0 : -1;
            out[k].dtype = VT_ST_I64;
            out[k].data = i64[i];
        } else {
            out[k].dtype = VT_ST_F32;
            out[k].data = t->data;
        }
    }
    for (int i = 0; i < vt_adamw_nstate(opt); i++, k++) {
        int64_t numel;
        const vt_tensor *p;
        out[k].data = vt_adamw_state(opt, i, names[k], VT_NAMELEN, &numel, &p);
        out[k].name = names[k];
        out[k].dtype = VT_ST_F32;
        out[k].ndim = p->ndim;
        for (int d = 0; d < p->ndim; d++) out[k].shape[d] = p->shape[d];
    }
    int64_t step[1] = {st->step}, epoch[1] = {st->epoch};
    out[k++] = (vt_st_out){"train/step", VT_ST_I64, 1, {1}, step};
    out[k++] = (vt_st_out){"train/epoch", VT_ST_I64, 1, {1}, epoch};
    char *meta = rc ? NULL : checkpoint_metadata(c, o, P, st, world_size);
    if (rc == 0)
        rc = meta ? vt_st_write(path, out, k, meta, e)
                  : vt_seterr_code(e, VT_E_NOMEM, "out of memory writing a checkpoint");
    cJSON_free(meta);
    for (int i = 0; i < P->n + ne; i++) vt_free(i64[i]);
    free(out);
    free(names);
    free(i64);
    return rc;
}

/* -1 with the reason in e when checkpoint f holds a tensor of a parameter P lacks (itself, its EMA or its AdamW
 * moments): a resume with fewer blocks or other model options than the run's would drop those weights silently. */
static int check_no_extra(const vt_st_file *f, const vt_params *P, const char *path, vt_err *e) {
    for (int i = 0; i < f->n; i++) {
        const char *nm = f->entries[i].name, *param = nm;
        if (strncmp(nm, "train/", 6) == 0) continue; /* the run's counters (0.6.0's train/rng too, unused since) */
        if (strncmp(nm, EMA_PREFIX, strlen(EMA_PREFIX)) == 0)
            param = nm + strlen(EMA_PREFIX);
        else if (strncmp(nm, "optim/m/", 8) == 0 || strncmp(nm, "optim/v/", 8) == 0)
            param = nm + 8;
        if (strlen(nm) < VT_NAMELEN - 1 && !vt_params_find(P, param)) /* (a key cut to fit names no parameter) */
            return vt_seterr(e, "%s holds tensor %s, which the model being resumed does not have (another model, "
                             "fewer --depths or other model options than the run's?): refused, its weights would be "
                             "dropped", path, nm);
    }
    return 0;
}

/* The part of an epoch that checkpoint f, stopped mid-epoch, holds (part_keys) into st; all 0 when f has none. -1 with
 * the reason in e for values vitc does not write: a part of no steps or of more than the checkpoint's, a negative
 * count, a loss or time not finite and >= 0 (check_resume bounds them by the run's batch). */
static int read_part(const vt_st_file *f, train_state *st, vt_err *e) {
    const char *v[5];
    int have = 0;
    for (int i = 0; i < 5; i++) have += (v[i] = vt_st_meta(f, part_keys[i])) != NULL;
    st->part_steps = st->part_correct = st->part_skipped = 0;
    st->part_loss = st->part_seconds = 0.0;
    if (have == 0) return 0;
    long long n[3] = {0, 0, 0};
    double d[2] = {0, 0};
    int ok = have == 5;
    for (int i = 0; ok && i < 5; i++) {
        char *end = NULL;
        if (i < 3)
            n[i] = strtoll(v[i], &end, 10);
        else
            d[i - 3] = strtod(v[i], &end);
        ok = *v[i] && !*end;
    }
    ok = ok && n[0] > 0 && n[0] <= st->step && n[1] >= 0 && n[2] >= 0 && d[0] >= 0 && d[0] < INFINITY && d[1] >= 0 &&
         d[1] < 1e9;
    if (!ok)
        return vt_seterr(e, "checkpoint's part of an epoch (%s \"%.20s\", %s \"%.20s\", %s \"%.20s\", %s \"%.30s\", "
                         "%s \"%.30s\") is not one vitc writes at step %lld: not a checkpoint vitc wrote", part_keys[0],
                         v[0] ? v[0] : "", part_keys[1], v[1] ? v[1] : "", part_keys[2], v[2] ? v[2] : "", part_keys[3],
                         v[3] ? v[3] : "", part_keys[4], v[4] ? v[4] : "", (long long)st->step);
    st->part_steps = n[0];
    st->part_correct = n[1];
    st->part_skipped = n[2];
    st->part_loss = d[0];
    st->part_seconds = d[1];
    return 0;
}

/* Restores the model, its optimiser state, the step and epoch, and the EMA (ema may be NULL): a checkpoint without
 * EMA tensors (a run started without --model-ema) starts the EMA from the restored weights, with a notice on log
 * (NULL: none). */
static int load_checkpoint(const char *path, vt_params *P, vt_adamw *opt, vt_params *ema, train_state *st, FILE *log,
                           vt_err *e) {
    vt_st_file f;
    if (vt_st_open(path, &f, e)) return -1;
    /* the heads, windows and attention the run was built with (a --heads on --resume would split its maps otherwise) */
    int rc = vt_weights_check_heads(P, &f, path, e) || vt_weights_check_windows(P, &f, path, e) ||
                     vt_weights_check_attn(P, &f, path, e) || check_no_extra(&f, P, path, e)
                 ? -1
                 : 0;
    /* each tensor checked as a weights file's (vt_param_read): shape, dtype, finite, variances, fixed buffers */
    for (int i = 0; rc == 0 && i < P->n; i++) rc = vt_param_read(&f, P->t[i]->name, P->t[i], P->t[i]->data, path, e);
    if (rc == 0 && ema && ema->n) {
        char nm[VT_NAMELEN];
        ema_key(nm, ema->t[0]->name);
        const int has = vt_st_find(&f, nm) != NULL;
        for (int i = 0; rc == 0 && i < ema->n; i++) {
            ema_key(nm, ema->t[i]->name);
            if (has)
                rc = vt_param_read(&f, nm, P->t[i], ema->t[i]->data, path, e);
            else
                memcpy(ema->t[i]->data, P->t[i]->data, sizeof(float) * (size_t)P->t[i]->numel);
        }
        if (rc == 0 && !has && log)
            fprintf(log, "Note: %s holds no model EMA; the EMA starts from its weights\n", path);
    }
    for (int i = 0; rc == 0 && i < vt_adamw_nstate(opt); i++) {
        char nm[VT_NAMELEN];
        int64_t numel;
        const vt_tensor *p;
        float *d = vt_adamw_state(opt, i, nm, sizeof nm, &numel, &p);
        rc = vt_param_read(&f, nm, p, d, path, e); /* a moment has its parameter's shape */
        for (int64_t j = 0; rc == 0 && strncmp(nm, "optim/v/", 8) == 0 && j < numel; j++)
            if (d[j] < 0.0f)
                rc = vt_seterr(e, "checkpoint tensor %s (a second moment) is negative at element %lld", nm,
                               (long long)j);
    }
    /* (checkpoints of vitc 0.6.0 and earlier also hold train/rng, the state of a Mixup/CutMix generator all ranks
     * shared, which keyed draws replaced: not read) */
    int64_t v[1];
    const char *keys[2] = {"train/step", "train/epoch"};
    for (int i = 0; rc == 0 && i < 2; i++) {
        const vt_st_entry *t = vt_st_find(&f, keys[i]);
        if (!t || t->numel != 1)
            rc = vt_seterr(e, "checkpoint lacks a valid %s", keys[i]);
        else if ((rc = vt_st_read_i64(t, v, 1, e)) == 0)
            *(i == 0 ? &st->step : &st->epoch) = v[0];
    }
    if (rc == 0) rc = read_part(&f, st, e);
    if (rc == 0 && (st->epoch < 0 || st->step < 0 || (st->epoch == 0) != (st->step - st->part_steps == 0)))
        rc = vt_seterr(e, "checkpoint counters epoch %lld, step %lld (%lld of them in the epoch it stopped in) are "
                       "inconsistent (epoch 0 and no step before it, or both positive)", (long long)st->epoch,
                       (long long)st->step, (long long)st->part_steps);
    else if (rc == 0 && st->epoch > VT_EPOCHS_MAX)
        rc = vt_seterr(e, "checkpoint is at epoch %lld, past the %d epochs a run may have: not a checkpoint vitc wrote",
                       (long long)st->epoch, VT_EPOCHS_MAX);
    vt_params_changed(P); /* written: graphs built on them renew their weight copies and constant nodes */
    if (ema) vt_params_changed(ema);
    const char *be = vt_st_meta(&f, "best_epoch"), *ba = vt_st_meta(&f, "best_acc1");
    st->best_epoch = -1; /* a checkpoint from before the best epoch was recorded: none yet */
    st->best_acc1 = 0.0;
    if (rc == 0 && be && ba) {
        char *e1, *e2;
        st->best_epoch = strtoll(be, &e1, 10);
        st->best_acc1 = strtod(ba, &e2);
        if (*e1 || *e2 || !*be || !*ba || st->best_epoch < -1 || st->best_epoch >= st->epoch ||
            !(st->best_acc1 >= 0.0 && st->best_acc1 <= 1.0))
            rc = vt_seterr(e, "checkpoint's best epoch \"%.20s\" (top-1 \"%.30s\") is not one of its epochs 0..%lld "
                           "with a top-1 in [0, 1]: not a checkpoint vitc wrote", be, ba, (long long)st->epoch - 1);
    }
    if (rc == 0) opt->step = st->step;
    vt_st_close(&f);
    return rc;
}

/* Whether paths a and b name the same existing folder. */
int same_dir(const char *a, const char *b) {
    struct stat x, y;
    return stat(a, &x) == 0 && stat(b, &y) == 0 && x.st_dev == y.st_dev && x.st_ino == y.st_ino;
}

/* Takes the run folder's lock (an fcntl lock on RUN/.lock, released when the process ends, even by SIGKILL); -1 if
 * another process holds it. Returns the descriptor that keeps the lock. */
int lock_run(const char *dir, vt_err *e) {
    char path[4096];
    if (snprintf(path, sizeof path, "%s/.lock", dir) >= (int)sizeof path) return vt_seterr(e, "run folder name too long");
    const int fd = open(path, O_RDWR | O_CREAT, 0644);
    if (fd < 0) return vt_seterr_code(e, VT_E_IO, "cannot create %s: %s", path, strerror(errno));
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
    if (fcntl(fd, F_SETLK, &fl) != 0) {
        const int err = errno;
        close(fd);
        if (err == EACCES || err == EAGAIN) /* held; anything else: the file system cannot lock (NFS without lockd) */
            return vt_seterr(e, "run folder %s is in use by another vitc process (lock %s held); use another --out",
                             dir, path);
        return vt_seterr_code(e, VT_E_IO, "cannot lock %s (the run folder's lock): %s", path, strerror(err));
    }
    return fd;
}

/* 1 when another process holds dir's run-folder lock (a run there is starting or training), else 0. */
static int run_locked(const char *dir) {
    char path[4096];
    if (snprintf(path, sizeof path, "%s/.lock", dir) >= (int)sizeof path) return 0;
    const int fd = open(path, O_RDONLY);
    if (fd < 0) return 0;
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
    const int held = fcntl(fd, F_GETLK, &fl) == 0 && fl.l_type != F_UNLCK;
    close(fd);
    return held;
}

/* Under the run folder's lock: removes the temporary files of a killed run's unfinished writes (says how many on
 * warn; NULL: not); 0. */
int stale_temps(const char *dir, FILE *warn) {
    const int n = vt_remove_stale_temps(dir);
    if (n > 0 && warn) { /* as every line on warn: "vitc: warning: ", the folder's name escaped */
        char text[PATH_MAX + 96];
        snprintf(text, sizeof text, "%s: removed %d temporary file%s of an earlier run's unfinished write", dir, n,
                 n == 1 ? "" : "s");
        vt_write_line(warn, "vitc: warning: ", text, 1);
    }
    return 0;
}

/* The value of key in a checkpoint's metadata ("model", "world_size"), into name (empty when absent); -1 with the
 * reason (e set; NULL: none) when the file does not open as safetensors: a damaged checkpoint is reported as such,
 * not read as one recording nothing (a run of one rank, any model). */
static int checkpoint_meta(const char *path, const char *key, char *name, size_t n, vt_err *e) {
    vt_st_file f;
    vt_err scratch = {0};
    name[0] = '\0';
    if (vt_st_open(path, &f, e ? e : &scratch)) return -1;
    const char *m = vt_st_meta(&f, key);
    if (m) snprintf(name, n, "%s", m);
    vt_st_close(&f);
    return 0;
}

/* Appends "key recorded → this run's" of setting s, recorded as rec, to buf (size n); numbers in %g form but the
 * seed (a 64-bit value), an empty text as "none". */
static void append_change(char *buf, size_t n, const run_setting *s, const char *rec) {
    const size_t len = strlen(buf);
    char was[48], now[48];
    const int raw = s->str || strcmp(s->key, "seed") == 0;
    snprintf(was, sizeof was, "%.6g", strtod(rec, NULL));
    snprintf(now, sizeof now, "%.6g", strtod(s->num, NULL));
    snprintf(buf + len, n - len, "%s%s %s → %s", len ? ", " : "", s->key, raw ? (*rec ? rec : "none") : was,
             raw ? (*setting_value(s) ? setting_value(s) : "none") : now);
}

/* On --resume from checkpoint path at st: refuses it when its step count does not fit this run's optimiser steps an
 * epoch (spe: batch size × accumulation steps, the data and the ranks set them, and the schedule counts steps),
 * naming the recorded settings that differ; otherwise prints a note naming the settings this run changes. A
 * checkpoint from before settings were recorded is checked by its step count alone. */
static int check_resume(const char *path, const vt_model_cfg *c, const vt_train_opts *o, const train_state *st,
                        int64_t spe, int ranks, vt_err *e) {
    run_setting s[RUN_SETTINGS];
    const int n = run_settings(c, o, st->images, s);
    char steps[1200] = "", other[2048] = "", was_images[32] = "", order[600] = "";
    long long images = 1; /* images an optimiser step in the checkpoint's run (batch size × accumulation steps) */
    int subset_same = 1, old_format = 0; /* the subset as recorded; a checkpoint from before train-images */
    vt_st_file f;
    if (vt_st_open(path, &f, e)) return -1;
    old_format = vt_st_meta(&f, "data") && !vt_st_meta(&f, "train-images");
    for (int i = 0; i < n; i++) {
        const char *rec = vt_st_meta(&f, s[i].key);
        if (rec && (strcmp(s[i].key, "batch-size") == 0 || strcmp(s[i].key, "accum-steps") == 0)) {
            const long long v = strtoll(rec, NULL, 10); /* each at most 2^20 as vitc writes them */
            images = v > 0 && v <= 1 << 20 && images > 0 ? images * v : 0;
        }
        if (!rec || strcmp(rec, setting_value(&s[i])) == 0) continue;
        char abs_rec[PATH_MAX]; /* a data folder recorded as given (before absolute paths), still the same folder */
        if (strcmp(s[i].key, "data") == 0 && realpath(rec, abs_rec) && strcmp(abs_rec, setting_value(&s[i])) == 0)
            continue;
        if (strcmp(s[i].key, "train-subset") == 0) subset_same = 0;
        if (strcmp(s[i].key, "train-images") == 0) snprintf(was_images, sizeof was_images, "%s", rec);
        append_change(s[i].steps ? steps : other, s[i].steps ? sizeof steps : sizeof other, &s[i], rec);
        char word[48];
        snprintf(word, sizeof word, " %s ", s[i].key); /* the settings that set an epoch's order and micro-batches */
        if (st->part_steps > 0 && strstr(" seed repeated-aug batch-size accum-steps train-subset ", word))
            append_change(order, sizeof order, &s[i], rec);
    }
    char files[17];
    files_text(st, files);
    const char *rec_files = st->files ? vt_st_meta(&f, FILES_KEY) : NULL;
    const int files_differ = rec_files && strcmp(rec_files, files) != 0;
    /* Fashion-MNIST for an image folder or the other way: no digest of files to compare (Fashion-MNIST records none),
     * other images and classes whatever their count */
    const char *rec_data = vt_st_meta(&f, "data");
    char was_data[PATH_MAX] = "";
    if (rec_data && (strcmp(rec_data, "fashion-mnist") == 0) != (strcmp(o->data, "fashion-mnist") == 0))
        snprintf(was_data, sizeof was_data, "%s", rec_data); /* (f's strings end with vt_st_close) */
    vt_st_close(&f);
    if (was_data[0])
        return vt_seterr(e, "%s: the run trained on %s, not on %s: resume with the run's data, or start a new run from "
                         "its weights (--init-from)", path, was_data, o->data);
    if (was_images[0] && subset_same) /* the data itself changed: another epoch order, whatever the step count */
        return vt_seterr(e, "%s: the run trained on %s images and its data now has %lld (%s): resume with the run's "
                         "data as it was, or start a new run from its weights (--init-from)", path, was_images,
                         (long long)st->images, o->data);
    if (files_differ && subset_same) /* as many images, but others: renamed, replaced or moved to another class */
        return vt_seterr(e, "%s: the run trained on other images than its data now holds (%s: as many, %lld, but "
                         "their names or classes differ): resume with the run's data as it was, or start a new run "
                         "from its weights (--init-from)", path, o->data, (long long)st->images);
    if (st->step - st->part_steps != st->epoch * spe || st->part_steps >= spe) {
        const int per_step = strstr(steps, "batch-size") || strstr(steps, "accum-steps");
        char hint[240];
        if (per_step && images > 0)
            snprintf(hint, sizeof hint, "resume with the checkpoint's values, or with its %lld images an optimiser step "
                     "(batch size × accumulation steps%s)", images, ranks > 1 ? ", per rank" : "");
        else
            snprintf(hint, sizeof hint, "resume with the %s of that run%s", steps[0] ? "values" : "settings",
                     steps[0] ? "" : " (its command.txt)");
        char part[64] = ""; /* a run stopped mid-epoch */
        if (st->part_steps)
            snprintf(part, sizeof part, " and %lld step%s into the next", (long long)st->part_steps,
                     st->part_steps == 1 ? "" : "s");
        return vt_seterr(e, "%s is at step %lld after %lld epoch%s%s, but this run takes %lld optimiser steps an "
                         "epoch: the learning-rate schedule would not continue the run's. %s%s%s%s", path,
                         (long long)st->step, (long long)st->epoch, st->epoch == 1 ? "" : "s", part, (long long)spe,
                         steps[0] ? "Changed: " : "", steps, steps[0] ? "; " : "", hint);
    }
    /* a run stopped mid-epoch goes on with the rest of that epoch's order, its micro-batches and record: what sets
     * them may not change (after the epoch's end it may) */
    const int64_t A = o->accum_steps > 0 ? o->accum_steps : 1, imgs = st->part_steps * A * o->batch * ranks;
    if (order[0])
        return vt_seterr(e, "%s was stopped %lld optimiser step%s into epoch %lld, whose order of images and "
                         "micro-batches the resume goes on with: resume with the run's settings until that epoch "
                         "ends, then change them (changed: %s)", path, (long long)st->part_steps,
                         st->part_steps == 1 ? "" : "s", (long long)st->epoch, order);
    if (st->part_steps > 0 && (st->part_correct > imgs || st->part_skipped > imgs ||
                               st->part_loss > (double)st->part_steps * (double)A * FLT_MAX))
        return vt_seterr(e, "%s: its part of epoch %lld (%lld right and %lld skipped of %lld images, loss sum %g) is "
                         "not one vitc writes: not a checkpoint vitc wrote", path, (long long)st->epoch,
                         (long long)st->part_correct, (long long)st->part_skipped, (long long)imgs, st->part_loss);
    if ((steps[0] || other[0]) && o->log)
        fprintf(o->log, "Note: this resumed run changes %s%s%s\n", steps, steps[0] && other[0] ? ", " : "", other);
    if (old_format && o->train_subset > 0 && strcmp(o->data, "fashion-mnist") != 0 && o->log)
        fprintf(o->log, "Note: %s was written by an earlier vitc, whose --train-subset took an image folder's first %d "
                "images; this run continues on %d images spread over its classes\n", path, o->train_subset,
                o->train_subset);
    return 0;
}

/* A resumed image-folder run: refuses classes other than those the run was trained on (RUN/classes.json, when the
 * run has one), naming what was added, removed or moved. */
int check_classes(const char *run, const vt_imagefolder *f, const char *data, vt_err *e) {
    char path[4096], **was = NULL;
    int n = 0;
    snprintf(path, sizeof path, "%s/classes.json", run);
    if (access(path, F_OK) != 0) return 0;
    if (vt_classes_read(path, &was, &n, e)) return -1;
    char diff[600] = "";
    size_t len = 0;
    int shown = 0, differ = n != f->nclasses;
    for (int pass = 0; pass < 2; pass++) /* 0: names gone from the data, 1: names new in it */
        for (int i = 0; i < (pass ? f->nclasses : n); i++) {
            const char *name = pass ? f->classes[i] : was[i];
            int found = 0;
            for (int j = 0; j < (pass ? n : f->nclasses) && !found; j++)
                found = strcmp(name, pass ? was[j] : f->classes[j]) == 0;
            if (found) continue;
            differ = 1;
            if (shown++ < 4 && len < sizeof diff)
                len += (size_t)snprintf(diff + len, sizeof diff - len, "%s%s '%s'", len ? "," : "",
                                        pass ? " new:" : " gone:", name);
        }
    for (int i = 0; !shown && i < n && i < f->nclasses; i++) /* the same names in another order */
        if (strcmp(was[i], f->classes[i]) != 0) {
            differ = 1;
            snprintf(diff, sizeof diff, " class %d was '%s', is now '%s'", i, was[i], f->classes[i]);
            break;
        }
    vt_classes_free(was, n);
    if (!differ) return 0;
    return vt_seterr(e, "the classes of %s differ from the %d the run in %s was trained on (%s; now %d):%s%s; its "
                     "weights' outputs would take other meanings: resume with that run's data, or start a new run "
                     "from its weights (--init-from)", data, n, run, path, f->nclasses, diff,
                     shown > 4 ? ", ..." : "");
}

/* Restores the checkpoint of o->resume into P, opt, ema (may be NULL) and st after checking it fits this run: its
 * rank count, epochs left to train, the optimiser steps of an epoch (spe) and the settings (check_resume). */
int resume_run(const vt_model_cfg *c, const vt_train_opts *o, vt_params *P, vt_adamw *opt, vt_params *ema,
               train_state *st, int ranks, int64_t spe, vt_err *e) {
    char rpath[4096], world[32];
    snprintf(rpath, sizeof rpath, "%s/checkpoint.safetensors", o->resume);
    if (checkpoint_meta(rpath, "world_size", world, sizeof world, e)) return -1;
    char *end = NULL;
    const long w = world[0] ? strtol(world, &end, 10) : 1; /* checkpoints from before data parallelism: one */
    if (world[0] && (*end || w < 1 || w > 1 << 20))
        return vt_seterr(e, "%s has a malformed world_size (\"%s\"): not a checkpoint vitc wrote", rpath, world);
    if (w != ranks)
        return vt_seterr(e, "%s was written by a run of %d rank%s but this run has %d; resume it with the same count "
                         "(%s)", rpath, (int)w, w == 1 ? "" : "s", ranks,
                         w == 1 ? "without mpirun, or mpirun -np 1" : "mpirun -np N with N as written");
    if (load_checkpoint(rpath, P, opt, ema, st, o->log, e)) return -1;
    const int run = run_epochs(o);
    char cool[64] = "";
    if (run > o->epochs) snprintf(cool, sizeof cool, " (--epochs %d and %d of cooldown)", o->epochs, run - o->epochs);
    if (st->epoch > run) /* asked for fewer epochs than it has trained: a contradiction, wherever it writes */
        return vt_seterr(e, "%s is at epoch %lld, past the %d epochs asked for%s: a run cannot be shortened; give "
                         "--epochs %lld or more to continue it", rpath, (long long)st->epoch, run, cool,
                         (long long)st->epoch - (run - o->epochs) + 1);
    if (st->epoch == run && !same_dir(o->resume, o->run_dir))
        return vt_seterr(e, "%s is at epoch %lld: a run of %d epochs%s has nothing left to train (its weights are in "
                         "that run folder); raise --epochs to continue it", rpath, (long long)st->epoch, run, cool);
    return check_resume(rpath, c, o, st, spe, ranks, e);
}

/* The files of a run in its folder, which a run that does not continue there replaces (clear_run_dir). */
static const char *const run_files[] = {"checkpoint.safetensors", "weights.safetensors", "weights_best.safetensors",
                                        "weights_ema.safetensors", "metrics.csv", "curves.png", "curves.gp",
                                        "recipe.json", "classes.json", "command.txt"};

/* The name of the run file of dir that path is (the same file: device and inode), or NULL. */
static const char *run_file_of(const char *dir, const char *path) {
    struct stat a, b;
    if (!path || stat(path, &a) != 0) return NULL;
    for (size_t i = 0; i < sizeof run_files / sizeof run_files[0]; i++) {
        char p[4096];
        snprintf(p, sizeof p, "%s/%s", dir, run_files[i]);
        if (stat(p, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino) return run_files[i];
    }
    return NULL;
}

/* 1 if the file at a is not empty and holds the first bytes of the file at b (all of b's with whole), 0 otherwise or
 * when one cannot be read. */
static int starts_alike(const char *a, const char *b, int whole) {
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    int same = fa && fb && fgetc(fa) != EOF && fseek(fa, 0, SEEK_SET) == 0;
    char ba[65536], bb[sizeof ba];
    for (size_t n; same && (n = fread(ba, 1, sizeof ba, fa)) > 0;)
        same = fread(bb, 1, n, fb) == n && memcmp(ba, bb, n) == 0;
    if (same && whole) same = fgetc(fb) == EOF;
    if (same) same = !ferror(fa) && !ferror(fb);
    if (fa) fclose(fa);
    if (fb) fclose(fb);
    return same;
}

/* Files a run writes only at an epoch's end, beside its checkpoint (weights_best also copied in at the start of a
 * run resumed from another folder). */
static const char *const epoch_files[] = {"weights.safetensors", "weights_best.safetensors", "weights_ema.safetensors",
                                          "curves.png", "curves.gp"};

/* 1 if run folder dir (which holds no checkpoint) holds only what a run resumed from folder `from` writes there
 * before its first checkpoint (a copy of from's first metrics rows, of its weights_best), nothing else of a run's:
 * the remains of an earlier try of the same resume, which this one may replace. */
static int resume_leftovers(const char *dir, const char *from) {
    char mine[4096], theirs[4096];
    for (size_t i = 0; i < sizeof epoch_files / sizeof epoch_files[0]; i++) {
        snprintf(mine, sizeof mine, "%s/%s", dir, epoch_files[i]);
        if (strcmp(epoch_files[i], "weights_best.safetensors") != 0 && access(mine, F_OK) == 0) return 0;
    }
    static const char *const copied[] = {"metrics.csv", "weights_best.safetensors"};
    int any = 0;
    for (int i = 0; i < 2; i++) {
        snprintf(mine, sizeof mine, "%s/%s", dir, copied[i]);
        snprintf(theirs, sizeof theirs, "%s/%s", from, copied[i]);
        if (access(mine, F_OK) != 0) continue;
        if (!starts_alike(mine, theirs, i == 1)) return 0;
        any = 1;
    }
    return any;
}

/* A fresh run may not replace another run's history: refuses a folder holding a checkpoint, metrics rows, weights or
 * curves unless overwrite (or they are what an earlier try of the same resume left there before its first
 * checkpoint), and an --init-from file that is one of the files the run replaces there (its weights would
 * be lost); resuming checks the checkpoint is the same model's. */
int check_run_dir(const vt_model_cfg *c, const vt_train_opts *o, vt_err *e) {
    char ck[4096], met[4096], model[256];
    const char *own = o->resume ? NULL : run_file_of(o->run_dir, o->init_from);
    if (own)
        return vt_seterr(e, "--init-from %s is the earlier run's %s in %s, which this run replaces: copy it out of the "
                         "run folder first, or train into another --out", o->init_from, own, o->run_dir);
    snprintf(ck, sizeof ck, "%s/checkpoint.safetensors", o->resume ? o->resume : o->run_dir);
    snprintf(met, sizeof met, "%s/metrics.csv", o->run_dir);
    if (o->resume) {
        if (access(ck, R_OK) != 0 && run_locked(o->resume)) /* a first run still before its first checkpoint */
            return vt_seterr(e, "cannot resume %s: a vitc process is running there and has written no checkpoint yet "
                             "(one comes at the end of each epoch); wait for it, or for that run to end", o->resume);
        if (access(ck, R_OK) != 0) /* before anything is written there (a folder that is not a run, a data folder) */
            return vt_seterr(e, "cannot resume %s: %s: %s (a run folder holds checkpoint.safetensors)", o->resume, ck,
                             strerror(errno));
        if (checkpoint_meta(ck, "model", model, sizeof model, e)) return -1;
        if (model[0] && strcmp(model, c->name) != 0)
            return vt_seterr(e, "%s holds a checkpoint of %s, not %s", ck, model, c->name);
        if (same_dir(o->resume, o->run_dir) || o->overwrite) return 0;
        snprintf(ck, sizeof ck, "%s/checkpoint.safetensors", o->run_dir);
    }
    if (o->overwrite) return 0;
    if (access(ck, F_OK) == 0) {
        checkpoint_meta(ck, "model", model, sizeof model, NULL); /* named where it can be read */
        return vt_seterr(e, "run folder %s already holds a run (a checkpoint%s%s); continue it with --resume %s, or "
                         "replace it with --overwrite", o->run_dir, model[0] ? " of " : "", model, o->run_dir);
    }
    if (o->resume && resume_leftovers(o->run_dir, o->resume)) return 0; /* an earlier try of this resume */
    if (access(met, F_OK) == 0) /* a run stopped before its first checkpoint (or one whose checkpoint went): nothing
                                 * to resume, and its metrics are not overwritten unasked */
        return vt_seterr(e, "run folder %s holds metrics.csv but no checkpoint.safetensors (a run stopped before its "
                         "first checkpoint, or its checkpoint removed): there is nothing to resume; replace it with "
                         "--overwrite, or train into another --out", o->run_dir);
    /* files written only at an epoch's end, beside a checkpoint: without one they are the user's (or the remains of a
     * run killed while writing its first epoch), and the new run would remove them (clear_run_dir) */
    for (size_t i = 0; i < sizeof epoch_files / sizeof epoch_files[0]; i++) {
        snprintf(met, sizeof met, "%s/%s", o->run_dir, epoch_files[i]);
        if (access(met, F_OK) == 0)
            return vt_seterr(e, "run folder %s holds %s but no checkpoint.safetensors: a run there would replace it; "
                             "move it elsewhere, replace it with --overwrite, or train into another --out", o->run_dir,
                             epoch_files[i]);
    }
    return 0;
}

/* Refuses a run folder inside the image folder data's train/ or val/ (or one of them itself): its files (curves.png,
 * weights) would be read as images of a class, or its folder as a class, when the run is resumed. Elsewhere under
 * data (e.g. data/runs/x) is fine. The run folder need not exist yet: its nearest existing ancestor is resolved. */
int out_inside_data(const char *run_dir, const char *data, vt_err *e) {
    char probe[PATH_MAX], rabs[PATH_MAX];
    if (snprintf(probe, sizeof probe, "%s", run_dir) >= (int)sizeof probe) return 0;
    struct stat st;
    while (stat(probe, &st) != 0) { /* up to the nearest ancestor that exists */
        char *slash = strrchr(probe, '/');
        if (!slash) {
            snprintf(probe, sizeof probe, ".");
            break;
        }
        if (slash == probe) slash[1] = '\0';
        else *slash = '\0';
    }
    if (!realpath(probe, rabs)) return 0;
    for (int k = 0; k < 2; k++) {
        char split[PATH_MAX], sabs[PATH_MAX];
        if (snprintf(split, sizeof split, "%s/%s", data, k ? "val" : "train") >= (int)sizeof split ||
            !realpath(split, sabs))
            continue;
        const size_t n = strlen(sabs);
        if (strncmp(rabs, sabs, n) == 0 && (rabs[n] == '\0' || rabs[n] == '/'))
            return vt_seterr(e, "run folder %s lies inside %s: its files would be read as images (or its folder as "
                             "a class) when the run is resumed; put it elsewhere (--out)", run_dir, split);
    }
    return 0;
}

/* Creates dir and its missing parents (like mkdir -p). */
int make_dirs(const char *dir, vt_err *e) {
    char path[4096];
    if (snprintf(path, sizeof path, "%s", dir) >= (int)sizeof path) return vt_seterr(e, "run folder name too long");
    for (char *p = path + 1;; p++) {
        if (*p != '/' && *p != '\0') continue;
        char c = *p;
        *p = '\0';
        struct stat st;
        if (mkdir(path, 0777) && errno != EEXIST) return vt_seterr(e, "cannot create %s: %s", path, strerror(errno));
        if (stat(path, &st) == 0 && !S_ISDIR(st.st_mode))
            return vt_seterr(e, "run folder %s: %s is a file, not a folder (--out names the folder a run writes)", dir,
                             path);
        *p = c;
        if (c == '\0') return 0;
    }
}

/* Writes o->command_line to path (RUN/command.txt), after the command lines of the run resumed (its command.txt), so
 * that the file holds every command the run was started with, in order. */
int command_record(const vt_train_opts *o, const char *path, vt_err *e) {
    if (!o->command_line) return 0;
    char old[4096];
    unsigned char *prev = NULL;
    size_t n = 0;
    snprintf(old, sizeof old, "%s/command.txt", o->resume ? o->resume : "");
    if (o->resume && access(old, F_OK) == 0 && vt_read_file(old, 1 << 20, &prev, &n, e)) return -1;
    const size_t m = strlen(o->command_line);
    char *text = malloc(n + m + 2);
    if (!text) {
        free(prev);
        return vt_seterr_code(e, VT_E_NOMEM, "out of memory");
    }
    if (n) memcpy(text, prev, n);
    if (n && text[n - 1] != '\n') text[n++] = '\n';
    memcpy(text + n, o->command_line, m + 1);
    free(prev);
    const int rc = vt_write_text(path, text, e);
    free(text);
    return rc;
}

/* A run that does not continue in its own folder (a fresh one, or one resumed from another folder) replaces what the
 * folder holds of an earlier run (--overwrite, or the leftovers of one that never wrote a checkpoint): its checkpoint,
 * weights, metrics, curves, recipe, classes and commands are removed before the new run writes its own, so that the
 * folder never holds two runs' files, also when the new run fails before its first checkpoint. */
int clear_run_dir(const char *dir, vt_err *e) {
    for (size_t i = 0; i < sizeof run_files / sizeof run_files[0]; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, run_files[i]);
        if (unlink(path) != 0 && errno != ENOENT)
            return vt_seterr_code(e, VT_E_IO, "cannot replace the earlier run in %s: removing %s: %s", dir,
                                  run_files[i], strerror(errno));
    }
    return 0;
}
