/* Gradients on a batch, evaluation, and the Fashion-MNIST training loop with atomic checkpoints. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "vitc/fileio.h"
#include "vitc/augment.h"
#include "vitc/dist.h"
#include "vitc/metrics.h"
#include "vitc/ops.h"
#include "vitc/optim.h"
#include "vitc/progress.h"
#include "vitc/safetensors.h"
#include "vitc/schedule.h"
#include "vitc/train.h"
#include "vitc/weights.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* A train-mode graph: logits, labels input and mean cross-entropy loss. */
typedef struct {
    vt_graph *g;
    vt_tensor *x, *labels, *logits, *loss;
} train_graph;

static int build_train(const vt_model_cfg *c, vt_params *P, int B, float smoothing, train_graph *t, vt_err *e) {
    memset(t, 0, sizeof *t);
    if (!(t->g = vt_graph_new(P, 1, e))) return -1;
    t->logits = vt_model_build(t->g, c, B, &t->x);
    t->labels = vt_input(t->g, "labels", 1, &B);
    t->loss = vt_cross_entropy(t->g, t->logits, t->labels, smoothing);
    vt_graph_output(t->g, t->logits);
    vt_graph_set_loss(t->g, t->loss);
    if (vt_graph_finalize(t->g, e)) {
        vt_graph_free(t->g);
        t->g = NULL;
        return -1;
    }
    return 0;
}

int vt_grad_steps(const vt_model_cfg *c, vt_params *P, const float *x, const float *labels, int B, int steps,
                  double lr, double wd, float *losses, vt_err *e) {
    vt_model_cfg tc = vt_model_training_form(c);
    tc.arch.drop_path = 0.0f; /* deterministic gradients: stochastic depth off */
    train_graph t;
    if (build_train(&tc, P, B, 0.0f, &t, e)) return -1;
    vt_adamw opt = {0};
    int rc = 0;
    if (steps > 1 && vt_adamw_init(&opt, P, 0.9f, 0.999f, 1e-8f, (float)wd, e)) rc = -1;
    memcpy(t.x->data, x, sizeof(float) * (size_t)t.x->numel);
    memcpy(t.labels->data, labels, sizeof(float) * (size_t)B);
    for (int s = 0; rc == 0 && s < (steps > 1 ? steps : 1); s++) {
        vt_graph_forward(t.g);
        losses[s] = t.loss->data[0];
        vt_params_zero_grad(P);
        vt_graph_backward(t.g);
        if (steps > 1 && s < steps - 1) vt_adamw_step(&opt, (float)lr);
    }
    if (steps > 1) vt_adamw_free(&opt);
    vt_graph_free(t.g);
    return rc;
}

/* Sum of the cross-entropy losses and of the correct top-1 predictions of the first n rows of logits (B, K). */
static void score(const float *logits, const int *labels, int n, int K, double *loss, int64_t *correct) {
    for (int b = 0; b < n; b++) {
        const float *r = logits + (size_t)b * K;
        int best = 0;
        for (int k = 1; k < K; k++)
            if (r[k] > r[best]) best = k;
        double se = 0.0;
        for (int k = 0; k < K; k++) se += exp((double)r[k] - r[best]);
        *loss += log(se) - ((double)r[labels[b]] - r[best]);
        *correct += best == labels[b];
    }
}

int vt_evaluate(const vt_model_cfg *c, vt_params *P, const vt_dataset *ds, int batch, double *loss, double *acc,
                FILE *progress, vt_err *e) {
    if (ds->h != c->arch.img_size || ds->w != c->arch.img_size || c->arch.in_chans != 1)
        return vt_seterr(e, "%s expects %d×%d×%d inputs but the dataset has 1×%d×%d images", c->name, c->arch.in_chans,
                         c->arch.img_size, c->arch.img_size, ds->h, ds->w);
    vt_graph *g = vt_graph_new(P, 0, e);
    if (!g) return -1;
    vt_tensor *x;
    vt_tensor *logits = vt_model_build(g, c, batch, &x);
    vt_graph_output(g, logits);
    int *idx = malloc(sizeof(int) * (size_t)batch), *lab = malloc(sizeof(int) * (size_t)batch);
    int rc = vt_graph_finalize(g, e);
    if (!idx || !lab) rc = vt_seterr(e, "out of memory");
    vt_augment aug = vt_augment_fmnist(0);
    aug.mean = c->pre.mean[0];
    aug.std = c->pre.std[0];
    double sl = 0.0;
    int64_t correct = 0;
    vt_progress pg; /* only when there is more than one batch */
    vt_progress_start(&pg, ds->n > batch ? progress : NULL, "Eval", "img", ds->n, 0);
    for (int s = 0; rc == 0 && s < ds->n; s += batch) {
        int n = ds->n - s < batch ? ds->n - s : batch;
        for (int i = 0; i < batch; i++) idx[i] = s + (i < n ? i : 0); /* pad the last batch, ignore extra rows */
        if ((rc = vt_augment_batch(ds, idx, batch, &aug, NULL, x->data, lab, e))) break;
        vt_graph_forward(g);
        score(logits->data, lab, n, c->arch.num_classes, &sl, &correct);
        vt_progress_update(&pg, s + n);
    }
    vt_progress_end(&pg);
    if (rc == 0) {
        *loss = sl / ds->n;
        *acc = (double)correct / ds->n;
    }
    free(idx);
    free(lab);
    vt_graph_free(g);
    return rc;
}

void vt_train_defaults(vt_train_opts *o) {
    memset(o, 0, sizeof *o);
    o->data = "fashion-mnist";
    o->epochs = 10;
    o->batch = 128;
    o->lr = 1e-3;
    o->min_lr = 1e-5;
    o->warmup_lr = 1e-6;
    o->weight_decay = 0.05;
    o->warmup_epochs = 1;
    o->smoothing = 0.1;
    o->seed = 0;
    o->augment = 1;
    o->log_every = 50;
    o->fault_nan_step = -1;
}

/* ---- checkpoints ---- */

typedef struct {
    int64_t step, epoch;
    vt_rng rng;
} train_state;

static int save_checkpoint(const char *path, const vt_model_cfg *c, vt_params *P, const vt_adamw *opt,
                           const train_state *st, int world_size, vt_err *e) {
    int n = P->n + vt_adamw_nstate(opt) + 3, k = 0;
    vt_st_out *out = calloc((size_t)n, sizeof *out);
    char(*names)[VT_NAMELEN] = calloc((size_t)n, VT_NAMELEN);
    int64_t(*i64)[1] = calloc((size_t)P->n, sizeof *i64);
    if (!out || !names || !i64) {
        free(out);
        free(names);
        free(i64);
        return vt_seterr(e, "out of memory writing a checkpoint");
    }
    for (int i = 0; i < P->n; i++, k++) {
        const vt_tensor *t = P->t[i];
        out[k].name = t->name;
        out[k].ndim = t->ndim;
        for (int d = 0; d < t->ndim; d++) out[k].shape[d] = t->shape[d];
        if (t->is_i64) {
            i64[i][0] = (int64_t)llround(t->data[0]);
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
    int64_t step[1] = {st->step}, epoch[1] = {st->epoch}, rng[4];
    memcpy(rng, st->rng.s, sizeof rng);
    out[k++] = (vt_st_out){"train/step", VT_ST_I64, 1, {1}, step};
    out[k++] = (vt_st_out){"train/epoch", VT_ST_I64, 1, {1}, epoch};
    out[k++] = (vt_st_out){"train/rng", VT_ST_I64, 1, {4}, rng};
    char meta[256];
    snprintf(meta, sizeof meta, "{\"model\": \"%s\", \"format\": \"vitc-checkpoint\", \"world_size\": \"%d\"}", c->name,
             world_size);
    int rc = vt_st_write(path, out, k, meta, e);
    free(out);
    free(names);
    free(i64);
    return rc;
}

/* Reads one tensor of f into dst (numel floats), checking its element count. */
static int ck_read(const vt_st_file *f, const char *name, float *dst, int64_t numel, vt_err *e) {
    const vt_st_entry *t = vt_st_find(f, name);
    if (!t) return vt_seterr(e, "checkpoint lacks tensor %s", name);
    if (t->numel != numel)
        return vt_seterr(e, "checkpoint tensor %s has %lld elements, expected %lld", name, (long long)t->numel,
                         (long long)numel);
    return vt_st_read_f32(t, dst, numel, e);
}

static int load_checkpoint(const char *path, vt_params *P, vt_adamw *opt, train_state *st, vt_err *e) {
    vt_st_file f;
    if (vt_st_open(path, &f, e)) return -1;
    int rc = 0;
    for (int i = 0; rc == 0 && i < P->n; i++) rc = ck_read(&f, P->t[i]->name, P->t[i]->data, P->t[i]->numel, e);
    for (int i = 0; rc == 0 && i < vt_adamw_nstate(opt); i++) {
        char nm[VT_NAMELEN];
        int64_t numel;
        const vt_tensor *p;
        float *d = vt_adamw_state(opt, i, nm, sizeof nm, &numel, &p);
        rc = ck_read(&f, nm, d, numel, e);
    }
    int64_t v[4];
    const char *keys[3] = {"train/step", "train/epoch", "train/rng"};
    for (int i = 0; rc == 0 && i < 3; i++) {
        const vt_st_entry *t = vt_st_find(&f, keys[i]);
        if (!t || t->numel != (i == 2 ? 4 : 1))
            rc = vt_seterr(e, "checkpoint lacks a valid %s", keys[i]);
        else if ((rc = vt_st_read_i64(t, v, t->numel, e)) == 0) {
            if (i == 0) st->step = v[0];
            if (i == 1) st->epoch = v[0];
            if (i == 2) memcpy(st->rng.s, v, sizeof st->rng.s);
        }
    }
    if (rc == 0) opt->step = st->step;
    vt_st_close(&f);
    return rc;
}

/* Takes the run folder's lock (an fcntl lock on RUN/.lock, released when the process ends, even by SIGKILL); -1 if
 * another process holds it. Returns the descriptor that keeps the lock. */
static int lock_run(const char *dir, vt_err *e) {
    char path[4096];
    if (snprintf(path, sizeof path, "%s/.lock", dir) >= (int)sizeof path) return vt_seterr(e, "run folder name too long");
    const int fd = open(path, O_RDWR | O_CREAT, 0644);
    if (fd < 0) return vt_seterr(e, "cannot create %s: %s", path, strerror(errno));
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
    if (fcntl(fd, F_SETLK, &fl) != 0) {
        close(fd);
        return vt_seterr(e, "run folder %s is in use by another vitc process (lock %s held); use another --out", dir,
                         path);
    }
    return fd;
}

/* The value of key in a checkpoint's metadata ("model", "world_size"), into name (empty when absent). */
static void checkpoint_meta(const char *path, const char *key, char *name, size_t n) {
    vt_st_file f;
    vt_err e = {{0}};
    name[0] = '\0';
    if (vt_st_open(path, &f, &e)) return;
    const char *m = vt_st_meta(&f, key);
    if (m) snprintf(name, n, "%s", m);
    vt_st_close(&f);
}

/* A fresh run may not replace another run's history: refuses a folder holding a checkpoint or metrics rows unless
 * overwrite; resuming checks the checkpoint is the same model's. */
static int check_run_dir(const vt_model_cfg *c, const vt_train_opts *o, vt_err *e) {
    char ck[4096], met[4096], model[256];
    snprintf(ck, sizeof ck, "%s/checkpoint.safetensors", o->resume ? o->resume : o->run_dir);
    snprintf(met, sizeof met, "%s/metrics.csv", o->run_dir);
    if (o->resume) {
        checkpoint_meta(ck, "model", model, sizeof model);
        if (model[0] && strcmp(model, c->name) != 0)
            return vt_seterr(e, "%s holds a checkpoint of %s, not %s", ck, model, c->name);
        if (strcmp(o->resume, o->run_dir) == 0 || o->overwrite) return 0;
        snprintf(ck, sizeof ck, "%s/checkpoint.safetensors", o->run_dir);
    }
    if (o->overwrite) return 0;
    if (access(ck, F_OK) == 0 || access(met, F_OK) == 0) {
        checkpoint_meta(ck, "model", model, sizeof model);
        return vt_seterr(e, "run folder %s already holds a run (%s%s%s); continue it with --resume %s, or replace it "
                         "with --overwrite", o->run_dir, access(ck, F_OK) == 0 ? "a checkpoint" : "metrics.csv",
                         model[0] ? " of " : "", model, o->run_dir);
    }
    return 0;
}

/* Creates dir and its missing parents (like mkdir -p). */
static int make_dirs(const char *dir, vt_err *e) {
    char path[4096];
    if (snprintf(path, sizeof path, "%s", dir) >= (int)sizeof path) return vt_seterr(e, "run folder name too long");
    for (char *p = path + 1;; p++) {
        if (*p != '/' && *p != '\0') continue;
        char c = *p;
        *p = '\0';
        if (mkdir(path, 0777) && errno != EEXIST) return vt_seterr(e, "cannot create %s: %s", path, strerror(errno));
        *p = c;
        if (c == '\0') return 0;
    }
}

/* ---- data-parallel hooks (the MPI side is dist.c) ---- */

/* Fills x (B images) and lab with samples idx[0..B), each augmented with draws keyed by (seed, epoch, sample index):
 * a sample's crop and flip do not depend on the batch, the rank or the rank count that handles it. */
static int augment_keyed(const vt_dataset *ds, const int *idx, int B, const vt_augment *aug, uint64_t seed,
                         int64_t epoch, float *x, int *lab, vt_err *e) {
    const size_t hw = (size_t)ds->h * (size_t)ds->w;
    for (int b = 0; b < B; b++) {
        vt_rng r;
        vt_rng_seed(&r, seed * 0x9e3779b97f4a7c15ULL ^ (uint64_t)(epoch + 1) * 0xbf58476d1ce4e5b9ULL ^
                            ((uint64_t)idx[b] + 1) * 0x94d049bb133111ebULL);
        if (vt_augment_batch(ds, idx + b, 1, aug, &r, x + (size_t)b * hw, lab + b, e)) return -1;
    }
    return 0;
}

/* vt_evaluate sharded over the ranks: each scores a contiguous slice of ds, the sums are reduced (rank 0's
 * parameters and buffers, e.g. BatchNorm running stats, are broadcast first so that every slice sees one model). */
static int evaluate_ranks(const vt_model_cfg *c, vt_params *P, const vt_dataset *ds, vt_dist *d, double *loss,
                          double *acc, FILE *progress, vt_err *e) {
    if (d->size == 1) return vt_evaluate(c, P, ds, 250, loss, acc, progress, e);
    if (vt_dist_broadcast(d, P, NULL, NULL, 0, e)) return -1;
    vt_dataset part = *ds; /* a view: not freed */
    const int lo = (int)((int64_t)ds->n * d->rank / d->size), hi = (int)((int64_t)ds->n * (d->rank + 1) / d->size);
    part.n = hi - lo;
    part.images += (size_t)lo * (size_t)ds->h * (size_t)ds->w;
    part.labels += lo;
    double l = 0.0, a = 0.0;
    const int rc = part.n > 0 ? vt_evaluate(c, P, &part, 250, &l, &a, progress, e) : 0;
    double v[2] = {l * part.n, round(a * part.n)};
    if (vt_dist_agree(d, rc, e) || vt_dist_sum(d, v, 2, e)) return -1;
    *loss = v[0] / ds->n;
    *acc = v[1] / ds->n;
    return 0;
}

/* ---- the training loop ---- */

/* The checks every rank makes alike before anything is touched. */
static int check_opts(const vt_model_cfg *c, const vt_train_opts *o, vt_err *e) {
    if (strcmp(o->data, "fashion-mnist") != 0)
        return vt_seterr(e, "unknown dataset '%s' (supported: fashion-mnist)", o->data);
    if (c->arch.in_chans != 1 || c->arch.img_size != 28)
        return vt_seterr(e, "%s takes %d×%d×%d inputs; Fashion-MNIST needs --img-size 28 --in-chans 1", c->name,
                         c->arch.in_chans, c->arch.img_size, c->arch.img_size);
    if (c->arch.num_classes != 10) return vt_seterr(e, "Fashion-MNIST has 10 classes (use --num-classes 10)");
    if (o->epochs <= 0 || o->batch <= 0 || !(o->lr > 0)) return vt_seterr(e, "epochs, batch size and lr must be > 0");
    if (!o->run_dir || !o->run_dir[0]) return vt_seterr(e, "empty run folder name (--out)");
    if (o->resume && !o->resume[0]) return vt_seterr(e, "empty run folder name (--resume)");
    return 0;
}

int vt_train(const vt_model_cfg *cfg, const vt_train_opts *o, vt_err *e) {
    const vt_model_cfg tc = vt_model_training_form(cfg), *c = &tc; /* `vitc deploy` merges re-parameterised blocks */
    vt_dist one = {.size = 1, .local_size = 1}, *d = o->dist ? o->dist : &one;
    const int lead = d->rank == 0; /* rank 0 alone prints, writes the run folder and holds its lock */
    FILE *out = lead ? stdout : NULL;
    vt_dataset tr = {0}, te = {0};
    vt_params *P = NULL;
    vt_adamw opt = {0};
    train_graph t = {0};
    vt_dist_grads *gb = NULL;
    int *idx = NULL, *lab = NULL, lock = -1, rc = check_opts(c, o, e);
    char cmd_path[4096];
    if (rc == 0 && lead) {
        snprintf(cmd_path, sizeof cmd_path, "%s/command.txt", o->run_dir);
        if (make_dirs(o->run_dir, e) || (lock = lock_run(o->run_dir, e)) < 0 || check_run_dir(c, o, e) ||
            (o->command_line && vt_write_text(cmd_path, o->command_line, e)))
            rc = -1;
    }
    if (rc == 0 &&
        (vt_dataset_load_fmnist(NULL, 1, &tr, e) || vt_dataset_load_fmnist(NULL, 0, &te, e) ||
         (o->train_subset > 0 && vt_dataset_subset(&tr, o->train_subset, e)) ||
         (o->test_subset > 0 && vt_dataset_subset(&te, o->test_subset, e)) || !(P = vt_params_new(e)) ||
         vt_model_init_params(c, P, o->seed, e) || build_train(c, P, o->batch, (float)o->smoothing, &t, e) ||
         vt_adamw_init(&opt, P, 0.9f, 0.999f, 1e-8f, (float)o->weight_decay, e) || !(gb = vt_dist_grads_new(d, t.g, e))))
        rc = -1;
    /* each rank's shard of an epoch: DistributedSampler's ceil(n / ranks) samples; a batch is per rank */
    const int B = o->batch, per_rank = (int)(((int64_t)tr.n + d->size - 1) / d->size), spe = per_rank / B;
    if (rc == 0 && spe == 0)
        rc = vt_seterr(e, "batch size %d is larger than the training set (%d%s)", B, per_rank,
                       d->size > 1 ? " per rank" : "");
    if (rc == 0 && (!(idx = malloc(sizeof(int) * (size_t)per_rank)) || !(lab = malloc(sizeof(int) * (size_t)B))))
        rc = vt_seterr(e, "out of memory");
    /* st.rng is kept for the checkpoint format; the epoch's order and augmentation are keyed by (seed, epoch, sample) */
    train_state st = {0, 0, {{0}}};
    vt_rng_seed(&st.rng, o->seed ^ 0xda7aULL);
    char ckpt[4096], wpath[4096];
    snprintf(ckpt, sizeof ckpt, "%s/checkpoint.safetensors", o->run_dir);
    snprintf(wpath, sizeof wpath, "%s/weights.safetensors", o->run_dir);
    if (rc == 0 && lead && o->resume) {
        char rpath[4096], world[32];
        snprintf(rpath, sizeof rpath, "%s/checkpoint.safetensors", o->resume);
        checkpoint_meta(rpath, "world_size", world, sizeof world);
        const int w = world[0] ? atoi(world) : 1; /* checkpoints from before data parallelism: one process */
        if (w != d->size)
            rc = vt_seterr(e, "%s was written by a run of %d rank%s but this run has %d; resume it with the same "
                           "count (%s)", rpath, w, w == 1 ? "" : "s", d->size,
                           w == 1 ? "without mpirun, or mpirun -np 1" : "mpirun -np N with N as written");
        else if (load_checkpoint(rpath, P, &opt, &st, e))
            rc = -1;
        else
            printf("Resumed from %s at epoch %lld, step %lld\n", rpath, (long long)st.epoch, (long long)st.step);
    }
    /* rows of epochs this run will (re)train would repeat: a crash between the row and the checkpoint, a resume from
     * an earlier checkpoint, or a fresh run in an old run folder */
    if (rc == 0 && lead && vt_metrics_truncate(o->run_dir, (double)st.epoch, e)) rc = -1;
    int64_t pos[2] = {st.step, st.epoch};
    if ((rc = vt_dist_agree(d, rc, e)) || (rc = vt_dist_broadcast(d, P, &opt, pos, 2, e))) goto done;
    st.step = pos[0];
    st.epoch = pos[1];
    const vt_sched sched = {o->lr, o->warmup_lr, o->min_lr, (int64_t)(o->warmup_epochs * spe),
                            (int64_t)o->epochs * spe, 0};
    vt_augment aug = vt_augment_fmnist(o->augment);
    aug.mean = c->pre.mean[0];
    aug.std = c->pre.std[0];
    const double t0 = now_s();
    const int64_t epoch_imgs = (int64_t)spe * B * d->size; /* over all ranks */
    double train_s = 0.0;
    int64_t steps_run = 0;
    for (; st.epoch < o->epochs; st.epoch++) {
        if (vt_dist_epoch_indices(d, tr.n, o->seed, st.epoch, idx, e) < 0) {
            rc = -1;
            goto done;
        }
        double lsum = 0.0, tbatch = now_s(), tep = tbatch;
        int64_t correct = 0;
        int last_i = 0; /* steps of this epoch done at the last progress line */
        vt_progress pg; /* a terminal gets one line redrawn, a pipe a line each log_every steps */
        vt_progress_start(&pg, out, "Train", "img", spe, o->log_every);
        for (int i = 0; i < spe; i++) {
            double lr = vt_sched_lr(&sched, st.step);
            if ((rc = augment_keyed(&tr, idx + (size_t)i * B, B, &aug, o->seed, st.epoch, t.x->data, lab, e)))
                goto done;
            for (int b = 0; b < B; b++) t.labels->data[b] = (float)lab[b];
            if (o->fault_nan_step == st.step && d->rank == d->size - 1) t.x->data[0] = NAN; /* the last rank only */
            /* drop-path masks of this step (and rank: ranks hold different samples) */
            t.g->seed = ((o->seed + 1) * 0x9e3779b97f4a7c15ULL ^ (uint64_t)st.step) + (uint64_t)d->rank * 0xd1b54a32d192ed03ULL;
            vt_graph_forward(t.g);
            int64_t c0 = 0;
            double l0 = 0.0, red[2] = {t.loss->data[0], 0.0};
            score(t.logits->data, lab, B, c->arch.num_classes, &l0, &c0);
            red[1] = (double)c0;
            if ((rc = vt_dist_sum(d, red, 2, e))) goto done; /* every rank sees the same loss (and NaN) */
            const double loss = red[0] / d->size;
            if (!isfinite(loss)) {
                rc = vt_seterr(e, "loss is %s at step %lld (epoch %lld, batch %d); stopped. The last good checkpoint "
                               "is %s", isnan(loss) ? "NaN" : "infinite", (long long)st.step, (long long)st.epoch, i,
                               o->resume || st.epoch > 0 ? ckpt : "(none yet)");
                vt_dist_agree(d, rc, e);
                goto done;
            }
            vt_params_zero_grad(P);
            vt_graph_backward(t.g);
            if ((rc = vt_dist_grads_average(gb, e))) goto done;
            if (o->clip_grad > 0) vt_clip_grad_norm(P, o->clip_grad);
            vt_adamw_step(&opt, (float)lr);
            st.step++;
            steps_run++;
            correct += (int64_t)red[1];
            lsum += loss;
            if (vt_progress_due(&pg, i + 1)) {
                double tn = now_s(), dt = (tn - tbatch) / (i + 1 - last_i);
                char line[256];
                snprintf(line, sizeof line, "Train: %lld [%4d/%d (%3.0f%%)]  Loss: %#.4g (%#.4g)  Time: %.3fs, %7.1f/s  "
                         "LR: %.3e", (long long)st.epoch, i + 1, spe, 100.0 * (i + 1) / spe, loss, lsum / (i + 1), dt,
                         (double)B * d->size / dt, lr);
                vt_progress_show(&pg, i + 1, line);
                tbatch = tn;
                last_i = i + 1;
            }
        }
        vt_progress_end(&pg);
        double ep_s = now_s() - tep, tl = 0, ta = 0;
        train_s += ep_s;
        if ((rc = evaluate_ranks(c, P, &te, d, &tl, &ta, pg.tty ? out : NULL, e))) goto done;
        if (lead) {
            printf("Test: epoch %lld  Loss: %.4f  Acc@1: %.2f%%  (train loss %.4f, acc %.2f%%, %.1f img/s)\n",
                   (long long)st.epoch, tl, 100 * ta, lsum / spe, 100.0 * correct / (double)epoch_imgs,
                   epoch_imgs / ep_s);
            fflush(stdout);
            vt_metrics_row row = {(double)st.epoch + 1, st.step, lsum / spe, (double)correct / (double)epoch_imgs, tl,
                                  ta, vt_sched_lr(&sched, st.step), epoch_imgs / ep_s, now_s() - t0};
            train_state next = st;
            next.epoch++;
            if (vt_metrics_append(o->run_dir, &row, e) || save_checkpoint(ckpt, c, P, &opt, &next, d->size, e) ||
                vt_params_save(P, wpath, e))
                rc = -1;
            vt_err pe = {{0}};
            if (rc == 0 && vt_plot_curves(o->run_dir, &pe)) fprintf(stderr, "vitc: warning: %s\n", pe.msg);
        }
        if ((rc = vt_dist_agree(d, rc, e))) goto done; /* rank 0's writes failed: every rank stops */
    }
    if (lead) {
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        printf("Done: %d epochs; weights in %s, curves in %s/curves.png; peak memory %.1f MiB\n", o->epochs, wpath,
               o->run_dir, ru.ru_maxrss / 1024.0);
        if (d->size > 1 && steps_run > 0)
            printf("Data parallel: %d ranks x batch %d; gradient averaging %.2f ms/step (%s allreduce, buckets of %.3g "
                   "MiB) of %.1f ms/step (%.1f%%)\n", d->size, B, 1e3 * d->comm_s / (double)steps_run,
                   d->overlap ? "overlapped" : "blocking", (double)d->bucket_bytes / (1 << 20),
                   1e3 * train_s / (double)steps_run, 100.0 * d->comm_s / train_s);
    }
done:
    free(idx);
    free(lab);
    vt_dist_grads_free(gb);
    vt_graph_free(t.g);
    vt_adamw_free(&opt);
    vt_params_free(P);
    vt_dataset_free(&tr);
    vt_dataset_free(&te);
    if (lock >= 0) close(lock); /* releases the run folder */
    return rc;
}
