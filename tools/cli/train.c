/* vitc train: the options resolved into a run (a resumed run's recorded settings, the recipe, the checks of what
 * contradicts or has no effect), the ranks' commands compared under mpirun, then vt_train. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "vitc/api.h"
#include "vitc/dist.h"
#include "vitc/loader.h"
#include "vitc/model.h"
#include "vitc/recipe.h"
#include "vitc/safetensors.h"
#include "vitc/schedule.h"
#include "vitc/train.h"

#include "cli.h"

/* Copies the text v recorded in checkpoint path under key into buf, or says it is too long. */
static int copy_recorded(char *buf, size_t size, const char *v, const char *key, const char *path) {
    if (strlen(v) >= size) {
        say_once("train", "%s records a %s of %zu bytes: not a checkpoint vitc wrote", path, key, strlen(v));
        return -1;
    }
    memcpy(buf, v, strlen(v) + 1);
    return 0;
}

/* Writes the model options given (or taken on --resume) into o->model_options, in the form take_model_options reads. */
static int record_model_options(opts *o) {
    if (given_options(o, RECORDED_OPTS, o->model_options, sizeof o->model_options))
        return die("%s", "the model options are too long to record in a checkpoint (or a value holds ' --')");
    return 0;
}

/* A checkpoint's metadata as key, value pairs of NUL-ended strings one after the other. */
typedef struct {
    char *buf;
    size_t len;
} recorded;

/* The value recorded for key, or NULL. */
static const char *rec_get(const recorded *r, const char *key) {
    for (size_t i = 0; r->buf && i < r->len;) {
        const char *k = r->buf + i, *v = k + strlen(k) + 1;
        if (strcmp(k, key) == 0) return v;
        i = (size_t)(v - r->buf) + strlen(v) + 1;
    }
    return NULL;
}

/* r: the metadata of checkpoint `path` as rank 0 reads it, on every rank (under mpirun the run folder need not exist
 * on the others' machines); r->buf NULL when rank 0 cannot read it. -1 on a failed broadcast. */
static int read_recorded(const vt_dist *d, const char *path, recorded *r, vt_err *e) {
    vt_st_file f;
    r->buf = NULL;
    r->len = 0;
    if (d->rank == 0 && vt_st_open(path, &f, e) == 0) {
        for (int i = 0; i < f.n_meta; i++) r->len += strlen(f.meta_keys[i]) + strlen(f.meta_vals[i]) + 2;
        char *p = r->buf = malloc(r->len ? r->len : 1);
        for (int i = 0; p && i < f.n_meta; i++) {
            const size_t a = strlen(f.meta_keys[i]) + 1, b = strlen(f.meta_vals[i]) + 1;
            memcpy(p, f.meta_keys[i], a);
            memcpy(p + a, f.meta_vals[i], b);
            p += a + b;
        }
        vt_st_close(&f);
        if (!r->buf) r->len = 0;
    }
    if (vt_dist_bcast_bytes(d, &r->buf, &r->len, e)) return -1;
    if (r->buf && (r->len == 0 || r->buf[r->len - 1] != '\0')) r->len = 0; /* (never: rank 0 built it) */
    return 0;
}

/* The shortest decimal that rounds to the float f (a model's rate, e.g. 0.1, not 0.10000000149011612). */
static double float_decimal(double f) {
    char buf[32];
    for (int p = 1; p <= 9; p++) {
        snprintf(buf, sizeof buf, "%.*g", p, f);
        if (strtof(buf, NULL) == (float)f) break;
    }
    return strtod(buf, NULL);
}

/* train --resume DIR: --out defaults to DIR, and each setting DIR's checkpoint records (vt_train's run settings, under
 * their option names) is the default of its option, checked as if given; a --recipe other than the checkpoint's keeps
 * that recipe's values instead of the recorded ones for what it sets. Under mpirun every rank takes rank 0's
 * checkpoint. A checkpoint that cannot be read is left to vt_train, which says what is wrong with it. */
static int resume_defaults(opts *o, const vt_dist *d) {
    if (!o->resume) return 0;
    if (!o->out_dir) o->out_dir = o->resume;
    char path[4096], what[4200];
    snprintf(path, sizeof path, "%s/checkpoint.safetensors", o->resume);
    snprintf(what, sizeof what, " (recorded in %s)", path);
    recorded f;
    vt_err e = {0};
    if (read_recorded(d, path, &f, &e)) return die("%s", e.msg);
    if (!f.buf) return 0;
    /* another model's checkpoint: said so before its recorded options are tried on this model (where they may not
     * fit it, an error about them would hide the cause) */
    const vt_model_cfg *named = vt_model_find(o->model ? o->model : "");
    const char *rmodel = rec_get(&f, "model");
    if (named && rmodel && strcmp(rmodel, named->name) != 0) {
        char msg[8400];
        snprintf(msg, sizeof msg, "%s holds a checkpoint of %s, not %s", path, rmodel, named->name);
        free(f.buf);
        return d->rank == 0 ? die("%s", msg) : 1; /* rank 0's checkpoint on every rank: rank 0 says it, once */
    }
    const char *rec = rec_get(&f, "recipe"), *mine = o->recipe ? o->recipe : "default";
    /* same: the recipe is the checkpoint's (a run without --recipe has vitc's defaults, the recipe "default") */
    const int same = !rec || strcmp(strcmp(rec, "none") ? rec : "default", mine) == 0 || !given(o, "--recipe");
    int rc = 0;
    if (rec && strcmp(rec, "none") && !given(o, "--recipe")) {
        rc = copy_recorded(o->resumed_recipe, sizeof o->resumed_recipe, rec, "recipe", path);
        o->recipe = o->resumed_recipe;
    }
    /* the recorded settings that are plain options; recipe: 1 for those a recipe sets */
    static const struct { const char *opt; int recipe; } plain[] = {
        {"--train-subset", 0}, {"--test-subset", 0}, {"--seed", 0}, {"--batch-size", 1}, {"--accum-steps", 1},
        {"--epochs", 1}, {"--cooldown-epochs", 1}, {"--lr", 1}, {"--min-lr", 1}, {"--warmup-lr", 1},
        {"--warmup-epochs", 1}, {"--weight-decay", 1}, {"--smoothing", 1}, {"--clip-grad", 1}, {"--mixup", 1},
        {"--cutmix", 1}, {"--mixup-prob", 1}, {"--mixup-switch-prob", 1}, {"--drop-path", 1},
        {"--cos-reg", 0}};
    for (size_t i = 0; rc == 0 && i < sizeof plain / sizeof plain[0]; i++) {
        const char *v = rec_get(&f, plain[i].opt + 2);
        if (!v || given(o, plain[i].opt) || (plain[i].recipe && !same)) continue;
        if (strstr(plain[i].opt, "-subset") && strcmp(v, "0") == 0) continue; /* 0: every image */
        rc = set_option("train", find_option(plain[i].opt), plain[i].opt, v, what, o);
    }
    /* a checkpoint of vitc 0.6.0 or earlier (settings recorded, no cos-reg among them): its run had no cos_reg term,
     * and a --recipe msf run no three-augment, which this version adds */
    if (rc == 0 && rec_get(&f, "train-images") && !rec_get(&f, "cos-reg")) {
        if (named && named->arch.cos_reg > 0 && !given(o, "--cos-reg")) {
            o->cos_reg = 0;
            if (d->rank == 0) /* (other ranks print errors only) */
                notice("%s records no cos-reg setting (vitc 0.6.0 or earlier, which had no cos_reg term): resumed "
                       "with --cos-reg 0, as it trained", path);
        }
        if (rec && !strcmp(rec, "msf") && same && d->rank == 0)
            notice("%s records a --recipe msf run of vitc 0.6.0 or earlier, which trained image folders without the "
                   "recipe's three-augment: the epochs to come run it", path);
    }
    if (rc == 0 && o->drop_path > 0 && !given(o, "--drop-path")) /* recorded from the model's float */
        o->drop_path = float_decimal(o->drop_path);
    const char *mo = rec_get(&f, "model-options");
    if (rc == 0 && mo) rc = copy_recorded(o->resumed_model, sizeof o->resumed_model, mo, "model-options", path);
    if (rc == 0 && mo) rc = take_model_options(o, "train", o->resumed_model, RECORDED_OPTS, NULL, path, what, NULL, 0);
    const char *data = rec_get(&f, "data"), *aug = rec_get(&f, "augment");
    const char *ra = rec_get(&f, "repeated-aug"), *ema = rec_get(&f, "model-ema-decay"), *on = rec_get(&f, "model-ema");
    const char *sbn = rec_get(&f, "sync-bn");
    if (rc == 0 && data && !given(o, "--data")) {
        rc = copy_recorded(o->resumed_data, sizeof o->resumed_data, data, "data", path);
        o->data = o->resumed_data;
    }
    if (aug && !given(o, "--augment") && !given(o, "--no-augment")) o->no_augment = strcmp(aug, "0") == 0;
    if (same && ra && !given(o, "--repeated-aug") && !given(o, "--no-repeated-aug")) {
        o->repeated_aug = strcmp(ra, "0") != 0;
        o->no_repeated_aug = !o->repeated_aug;
    }
    if (rc == 0 && rec_get(&f, "train-images") && !sbn && !given(o, "--sync-bn") && !given(o, "--no-sync-bn")) {
        o->no_sync_bn = 1; /* vitc 0.6.2 or earlier: each rank's own statistics, whatever the recipe says now */
        if (!strcmp(o->recipe ? o->recipe : rec ? rec : "", "groupmixformer") && d->size > 1 && d->rank == 0)
            notice("%s records no sync-bn setting (vitc 0.6.2 or earlier, which had no synchronised BatchNorm): "
                   "resumed with --no-sync-bn, as it trained (give --sync-bn to change that)", path);
    } else if (same && sbn && !given(o, "--sync-bn") && !given(o, "--no-sync-bn")) {
        o->sync_bn = strcmp(sbn, "0") != 0;
        o->no_sync_bn = !o->sync_bn;
    }
    if (rc == 0 && same && ema && !given(o, "--no-model-ema")) {
        const int was_on = strcmp(on ? on : ema, "0") != 0; /* before model-ema was recorded: a decay of 0 said off */
        if (!given(o, "--model-ema")) {
            o->model_ema = was_on;
            o->no_model_ema = !was_on;
        }
        if (was_on && !given(o, "--model-ema-decay")) /* its decay also where --model-ema repeats the setting */
            rc = set_option("train", find_option("--model-ema-decay"), "--model-ema-decay", ema, what, o);
    }
    free(f.buf);
    return rc ? 1 : 0;
}

/* The recipe (--recipe, else vitc's defaults) with the explicit options over it. */
static int train_recipe(opts *o, vt_recipe *r) {
    vt_err e = {0};
    if (vt_recipe_get(o->recipe ? o->recipe : "default", o->model, r, &e))
        return e.code == VT_E_USAGE ? refuse("train", "%s", e.msg) : die("%s", e.msg);
    if (o->epochs) r->epochs = o->epochs;
    if (o->cooldown_epochs >= 0) r->cooldown_epochs = o->cooldown_epochs;
    if (o->batch) r->batch = o->batch;
    if (o->accum_steps) r->accum_steps = o->accum_steps;
    if (o->lr > 0) r->lr = o->lr, r->lr_given = 1;
    if (o->wd >= 0) r->weight_decay = o->wd;
    if (o->warmup_epochs >= 0) r->warmup_epochs = o->warmup_epochs;
    if (o->min_lr >= 0) r->min_lr = o->min_lr, r->min_lr_given = 1;
    if (o->warmup_lr >= 0) /* a share of the lr (MSF's) follows an --lr given on resume, the recorded start else */
        r->warmup_lr = o->warmup_lr,
        r->warmup_lr_given = given(o, "--warmup-lr") || !(r->warmup_lr_rel > 0) || !given(o, "--lr");
    if (o->smoothing >= 0) r->smoothing = o->smoothing;
    if (o->clip >= 0) r->clip_grad = o->clip;
    if (o->mixup >= 0) r->mixup.mixup_alpha = o->mixup;
    if (o->cutmix >= 0) r->mixup.cutmix_alpha = o->cutmix;
    if (o->mixup_prob >= 0) r->mixup.prob = o->mixup_prob;
    if (o->mixup_switch >= 0) r->mixup.switch_prob = o->mixup_switch;
    if (o->model_ema || o->no_model_ema) r->model_ema = o->model_ema;
    if (o->ema_decay >= 0) r->model_ema_decay = o->ema_decay;
    if (o->repeated_aug || o->no_repeated_aug) r->repeated_aug = o->repeated_aug;
    if (o->sync_bn || o->no_sync_bn) r->sync_bn = o->sync_bn;
    if (o->drop_path < 0 && r->drop_path >= 0) o->drop_path = r->drop_path; /* the recipe's rate for the model */
    r->drop_path = o->drop_path;
    return 0;
}

/* Where train's schedule option opt (--lr, --min-lr, --warmup-lr, --warmup-epochs) got its value, for messages: the
 * command line, the checkpoint resumed (recorded: set though not given), the recipe or vitc's default. */
static const char *lr_source(const opts *o, const char *opt, int recorded, char *buf, size_t n) {
    if (given(o, opt))
        snprintf(buf, n, "%s", opt);
    else if (recorded)
        snprintf(buf, n, "%s recorded in %s/checkpoint.safetensors", opt, o->resume);
    else if (o->recipe)
        snprintf(buf, n, "the %s recipe's %s", o->recipe, opt);
    else
        snprintf(buf, n, "the default %s", opt);
    return buf;
}

/* train --recipe list [MODEL]: every recipe's settings (MODEL: with its per-model rates); no other option. */
static int list_recipes(const opts *o) {
    for (size_t k = 0; k < noptdefs; k++)
        if (o->given[k] && strcmp(optdefs[k].name, "--recipe") != 0)
            return refuse("train", "--recipe list prints the recipes and takes no other option (got %s)",
                          optdefs[k].name);
    if (o->model && !vt_model_find(o->model)) return unknown_model("train", o->model);
    int rank = 0;
    vt_dist_env(&rank, NULL, NULL);
    for (int i = 0; rank == 0 && i < vt_recipe_count(); i++) { /* under mpirun: listed once */
        vt_recipe r;
        vt_err e = {0};
        if (vt_recipe_get(vt_recipe_name(i), o->model, &r, &e)) return die("%s", e.msg);
        if (o->model && r.drop_path < 0) r.drop_path = float_decimal(vt_model_find(o->model)->arch.drop_path);
        vt_recipe_print(&r, stdout);
    }
    return 0;
}

/* 1 when a warm-up of w epochs ends within a run of `epochs` (the cosine's), so that it trains at its peak learning
 * rate: when the rate changes every step, one step after the warm-up must run (w < epochs); once an epoch, an epoch
 * (w <= epochs - 1); under DeiT's main.py, whose epoch e trains at the value for e - 1, two (w <= epochs - 2). The
 * bound as words ("at most 3", "less than 4") into hint (n bytes). */
static int warmup_ends(double w, int epochs, int update, char *hint, size_t n) {
    const int most = epochs - (update == VT_SCHED_EPOCH ? 1 : update == VT_SCHED_DEIT ? 2 : 0);
    if (update != VT_SCHED_EPOCH && update != VT_SCHED_DEIT) {
        snprintf(hint, n, "less than %d", epochs);
        return w < epochs;
    }
    snprintf(hint, n, "at most %d", most > 0 ? most : 0);
    return w <= most;
}

/* " (...)" for messages: how the learning rate of update mode `update` changes, or "" every step. */
static const char *update_words(int update) {
    return update == VT_SCHED_EPOCH ? " (the learning rate changes once an epoch)"
         : update == VT_SCHED_DEIT  ? " (the learning rate changes once an epoch, after it, as DeiT's main.py steps it)"
                                    : "";
}

/* Refuses the train options given that r (the resolved recipe) leaves without effect; 0 when there is none. Options
 * a resume took from its checkpoint are not given and never refused. */
static int train_unused_options(const opts *o, const vt_recipe *r) {
    const vt_mixup *m = &r->mixup;
    if (given(o, "--model-ema-decay") && !r->model_ema)
        return refuse("train", "--model-ema-decay has no effect without a weight EMA (%s): add --model-ema",
                      given(o, "--no-model-ema") ? "--no-model-ema"
                      : o->no_model_ema          ? "the run resumed keeps none"
                      : o->recipe                ? "the recipe keeps none"
                                                 : "off by default");
    if (given(o, "--mixup-prob") && !(m->mixup_alpha > 0 || m->cutmix_alpha > 0))
        return refuse("train", "--mixup-prob has no effect with mixing off (--mixup and --cutmix are 0): give --mixup "
                      "or --cutmix above 0");
    if (given(o, "--mixup-switch-prob") && !(m->mixup_alpha > 0 && m->cutmix_alpha > 0 && m->prob > 0))
        return refuse("train", "--mixup-switch-prob chooses between Mixup and CutMix, so it has no effect unless both "
                      "are on (here --mixup %g, --cutmix %g, --mixup-prob %g)", m->mixup_alpha, m->cutmix_alpha,
                      m->prob);
    char most[48];
    if (given(o, "--warmup-epochs") && !warmup_ends(r->warmup_epochs, r->epochs, r->sched_update, most, sizeof most))
        return refuse("train", "--warmup-epochs %g does not end within the run (--epochs %d)%s: the learning rate "
                      "would never reach its peak; give %s", r->warmup_epochs, r->epochs,
                      update_words(r->sched_update), most);
    if (given(o, "--warmup-lr") && r->warmup_epochs == 0)
        return refuse("train", "--warmup-lr has no effect without a warm-up (--warmup-epochs is 0%s)",
                      given(o, "--warmup-epochs") ? "" : ": the run resumed's or the recipe's");
    return 0;
}

/* Options of train's command line that contradict each other: refused as usage errors (exit status 2). Every rank
 * has the same options (same_rank_command); whether --out is the resumed folder is rank 0's answer (its file system
 * holds the run folder), so that the ranks refuse together, never one alone while the others wait. */
static int train_contradictions(const opts *o, const vt_dist *d) {
    static const char *const pairs[][2] = {{"--model-ema", "--no-model-ema"},
                                           {"--repeated-aug", "--no-repeated-aug"},
                                           {"--sync-bn", "--no-sync-bn"},
                                           {"--augment", "--no-augment"}};
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++)
        if (given(o, pairs[i][0]) && given(o, pairs[i][1]))
            return refuse("train", "%s and %s contradict each other", pairs[i][0], pairs[i][1]);
    if (given(o, "--resume") && given(o, "--init-from"))
        return refuse("train", "--resume and --init-from contradict each other: a resumed run continues its "
                               "checkpoint");
    if (given(o, "--resume") && given(o, "--overwrite")) { /* a run resumed in its own folder keeps its history */
        struct stat a, b;
        int64_t same = !o->out_dir || (stat(o->resume, &a) == 0 && stat(o->out_dir, &b) == 0 &&
                                       a.st_dev == b.st_dev && a.st_ino == b.st_ino);
        vt_err e = {0};
        if (vt_dist_bcast_i64(d, &same, 1, &e)) return die("%s", e.msg);
        if (same)
            return refuse("train", "--overwrite has no effect on a run resumed in its own folder (it continues its "
                          "history there); it replaces another run's folder given with --out");
    }
    return 0;
}

/* The run's stop flags (vt_stop: asked holds the signal that asked), and whether the handler says so on stderr (rank
 * 0; a newline first on a terminal, which holds a progress line). Static: a signal handler reaches nothing else, and it
 * may only write volatile sig_atomic_t; one run per process. */
static vt_stop stops;
static volatile sig_atomic_t stop_says;

/* SIGINT, SIGTERM, SIGHUP or SIGUSR1 while the run trains: it stops at the end of its optimiser step with a
 * checkpoint; before or after that, and the same signal again, end the process at once (the handler was reset:
 * SA_RESETHAND), its files whole as ever (atomic writes). */
static void ask_stop(int sig) {
    static const char line[] = "vitc: train: stopping at the end of this optimiser step, with a checkpoint (the same "
                               "signal again stops at once)\n";
    if (!stops.training) { /* nothing to save yet: the signal, now at its default action, ends the process */
        raise(sig);
        return;
    }
    if (!stops.asked) stops.asked = sig;
    if (stop_says == 2) (void)!write(2, "\n", 1);
    if (stop_says) (void)!write(2, line, sizeof line - 1);
}

/* Installs ask_stop for the signals that ask a run to stop, but those ignored when vitc started (nohup's SIGHUP, a
 * shell's background job's SIGINT), which stay ignored; says = 1 on the rank that announces a stop. */
static void catch_stops(int says) {
    static const int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGUSR1};
    stop_says = says ? 1 + isatty(2) : 0;
    struct sigaction sa, was;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = ask_stop;
    sa.sa_flags = SA_RESTART | SA_RESETHAND;
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
        if (sigaction(sigs[i], NULL, &was) == 0 && was.sa_handler != SIG_IGN) sigaction(sigs[i], &sa, NULL);
}

/* train on rank d of the run (one process without mpirun): from the options to vt_train. */
static int train_rank(opts *o, vt_dist *d) {
    vt_recipe r;
    vt_model_cfg c;
    int rc = resume_defaults(o, d); /* each 1, or 2 for a usage error (an unknown --recipe) */
    if (!rc) rc = record_model_options(o);
    if (!rc) rc = train_recipe(o, &r);
    if (rc) return rc;
    const int unused = train_unused_options(o, &r);
    if (unused) return unused;
    const int mc = model_cfg(o, &c); /* 2: a malformed list option */
    if (mc) return mc;
    if (c.arch.int8) return refuse("train", "--dtype int8 is for inference; train in fp32 or bf16");
    vt_train_opts t;
    vt_train_defaults(&t);
    if (!o->out_dir) return missing("--out RUN_DIR");
    if (o->data) t.data = o->data;
    t.data_recorded = o->resume && o->data && !given(o, "--data") && strcmp(o->data, "fashion-mnist") != 0;
    t.run_dir = o->out_dir;
    t.resume = o->resume;
    t.workers = o->workers;
    vt_err e = {0};
    if (d->size <= 1 && given(o, "--sync-bn"))
        notice("--sync-bn: BatchNorms synchronise over data-parallel ranks only (mpirun); this run is one process, "
               "whose BatchNorms see its whole batch");
    if (d->size <= 1 && (given(o, "--bucket-mib") || given(o, "--no-overlap")))
        notice("%s%s%s: gradient averaging happens only under mpirun (data-parallel ranks); this run is one process",
               given(o, "--bucket-mib") ? "--bucket-mib" : "", given(o, "--bucket-mib") && o->no_overlap ? " and " : "",
               o->no_overlap ? "--no-overlap" : "");
    if (d->size > 1) {
        if (o->bucket_mib > 0) d->bucket_bytes = (size_t)(o->bucket_mib * 1048576.0);
        d->overlap = !o->no_overlap;
        if (t.workers == 0) /* the node's cores are shared by its ranks' loaders too */
            t.workers = vt_loader_default_workers() / d->local_size > 1 ? vt_loader_default_workers() / d->local_size
                                                                        : 1;
        t.dist = d;
    }
    r.world_size = d->size; /* a recipe's lr scales with the global batch */
    vt_recipe_apply(&r, &t);
    /* the schedule climbs from the warm-up lr to the peak, then the cosine falls to the final lr: a final lr above
     * the peak would raise it, a warm-up lr above it would lower it during the warm-up (unused without one), whatever
     * their source; both named when both are (rank 0 alone prints) */
    const int min_above = t.min_lr > t.lr, warm_above = t.warmup_epochs > 0 && t.warmup_lr > t.lr;
    if (min_above || warm_above) {
        char from[4200], peak[4200];
        lr_source(o, "--lr", o->lr > 0, peak, sizeof peak);
        if (min_above && d->rank == 0)
            fprintf(stderr, "vitc: the final learning rate %g (%s) is above the peak %g (%s): give --min-lr at most "
                    "%g (e.g. --min-lr 0)\n", t.min_lr, lr_source(o, "--min-lr", o->min_lr >= 0, from, sizeof from),
                    t.lr, peak, t.lr);
        if (warm_above && d->rank == 0)
            fprintf(stderr, "vitc: the warm-up's starting learning rate %g (%s) is above the peak %g (%s): the warm-up "
                    "would lower the learning rate to its peak; give --warmup-lr at most %g (e.g. --warmup-lr 0)\n",
                    t.warmup_lr, lr_source(o, "--warmup-lr", o->warmup_lr >= 0, from, sizeof from), t.lr, peak, t.lr);
        return 2; /* settings that contradict each other: a usage error */
    }
    /* a warm-up longer than the run, given, is refused (train_unused_options); from a recipe or a checkpoint, the
     * run is timm's, whose scheduler keeps warming up past the end: said once */
    char from[4200], notice[4800];
    char wmax[48];
    /* printed by vt_train after its data checks */
    if (!given(o, "--warmup-epochs") && !warmup_ends(t.warmup_epochs, t.epochs, t.sched_update, wmax, sizeof wmax)) {
        const int n = snprintf(notice, sizeof notice, "Note: the warm-up of %g epoch%s (%s) does not end within the "
                               "%s%d epoch%s%s: the learning rate ", t.warmup_epochs, t.warmup_epochs == 1 ? "" : "s",
                               lr_source(o, "--warmup-epochs", o->warmup_epochs >= 0, from, sizeof from),
                               t.cooldown_epochs > 0 ? "cosine's " : "run's ", t.epochs, t.epochs == 1 ? "" : "s",
                               update_words(t.sched_update));
        const int still = (t.sched_update == VT_SCHED_EPOCH && t.epochs + t.cooldown_epochs < 2) ||
                          (t.sched_update == VT_SCHED_DEIT && t.epochs + t.cooldown_epochs < 3);
        if (still) /* every epoch at the schedule's first value (DeiT's: epochs 0 and 1 both) */
            snprintf(notice + n, sizeof notice - (size_t)n, "stays at the warm-up's first value %g for the whole "
                     "run, never reaching its peak %g; give --warmup-epochs %s to change it", t.warmup_lr, t.lr, wmax);
        else if (t.cooldown_epochs > 0 && t.warmup_epochs < t.epochs + t.cooldown_epochs) /* the cooldown after it */
            snprintf(notice + n, sizeof notice - (size_t)n, "rises for %g epochs without reaching its peak %g, then "
                     "drops to the final %g for the rest of the run's %d epochs (%d of cooldown), as in timm; give "
                     "--warmup-epochs %s to change it", t.warmup_epochs, t.lr, t.min_lr,
                     t.epochs + t.cooldown_epochs, t.cooldown_epochs, wmax);
        else
            snprintf(notice + n, sizeof notice - (size_t)n, "rises for the whole run and never reaches its peak %g nor "
                     "decays (as in timm); give --warmup-epochs %s to change it", t.lr, wmax);
        t.notice = notice;
    }
    if (!o->recipe) t.recipe = NULL; /* plain runs print and save no recipe */
    t.init_from = o->init_from;
    t.seed = (uint64_t)o->seed;
    t.augment = !o->no_augment;
    t.train_subset = o->train_subset;
    t.test_subset = o->test_subset;
    if (o->log_every > 0) t.log_every = o->log_every;
    if (o->fault_nan_step >= 0) t.fault_nan_step = o->fault_nan_step;
    if (o->fault_batch_step >= 0) t.fault_batch_step = o->fault_batch_step;
    if (o->fault_nan_eval >= 0) t.fault_nan_eval = o->fault_nan_eval;
    if (o->fault_grad_step >= 0) t.fault_grad_step = o->fault_grad_step;
    if (o->fault_stop_step >= 0) t.fault_stop_step = o->fault_stop_step;
    const size_t room = strlen(o->cmdline) + 32; /* under mpirun with the rank count (a recipe's lr scales with it) */
    char *line = malloc(room);
    if (!line) return die("%s", "out of memory");
    if (d->size > 1) snprintf(line, room, "mpirun -np %d %s", d->size, o->cmdline);
    else snprintf(line, room, "%s", o->cmdline);
    t.command_line = line;
    t.model_options = o->model_options;
    t.overwrite = o->overwrite;
    warn_busy_cores(); /* after the usage checks: a usage error is said alone */
    catch_stops(d->rank == 0);
    t.stop = &stops;
    const int trained = vt_train(&c, &t, &e);
    free(line);
    if (trained == 0) return 0;
    if (trained == 1) /* stopped as asked: the shell's status of the signal (of SIGINT for --fault-stop-step) */
        return 128 + (stops.asked ? stops.asked : SIGINT);
    /* one report: the lowest failing rank's (die tags the others' with their rank); a rank failing alone stops all */
    if (!d->err_shared || d->err_reporter) die("%s", e.msg);
    if (d->size > 1 && !d->err_shared) vt_dist_abort(d, 1);
    return e.code == VT_E_USAGE ? 2 : 1; /* settings the run cannot take together (an odd batch with Mixup) */
}

/* Train options that may differ between the ranks of one mpirun: the paths of each machine's copies (compared by
 * presence) and each process's own settings (not compared). */
#define PATH_OPTS "--out --data --resume --init-from "
#define PROCESS_OPTS "--threads --workers --log-every "

/* The train command as every rank of an mpirun must give it: the model, then each given option with its value
 * ("--lr=5:0.001": the value's length first, so that no value can read as more options), PATH_OPTS by name alone
 * and PROCESS_OPTS left out; malloc'd, NULL if out of memory. */
static char *rank_command(const opts *o) {
    char *s = NULL, ver[48]; /* the version first: ranks of other builds differ in the first exchange they make */
    snprintf(ver, sizeof ver, "vitc %d.%d.%d: ", VITC_VERSION_MAJOR, VITC_VERSION_MINOR, VITC_VERSION_PATCH);
    const char *model = o->model ? o->model : "";
    for (int pass = 0; pass < 2; pass++) { /* the length, then the text */
        size_t used = strlen(ver) + strlen(model);
        if (pass) snprintf(s, used + 1, "%s%s", ver, model);
        for (size_t k = 0; k < noptdefs; k++) {
            const optdef *d = &optdefs[k];
            if (!o->given[k] || has_word(PROCESS_OPTS, d->name)) continue;
            char v[64], len[24] = "";
            const char *val = d->kind == O_FLAG || has_word(PATH_OPTS, d->name) ? "" : option_text(o, d, v, sizeof v);
            if (*val) snprintf(len, sizeof len, "=%zu:", strlen(val));
            const size_t m = 1 + strlen(d->name) + strlen(len) + strlen(val);
            if (pass) snprintf(s + used, m + 1, " %s%s%s", d->name, len, val);
            used += m;
        }
        if (!pass && !(s = malloc(used + 1))) return NULL;
    }
    return s;
}

/* rank_command's text s for a message, in place: each "=LEN:" before a value becomes a blank; returns s. */
static char *readable(char *s) {
    char *w = s;
    for (const char *r = s; *r;) {
        size_t digits = r[0] == '=' ? strspn(r + 1, "0123456789") : 0;
        if (digits && r[1 + digits] == ':') {
            *w++ = ' ';
            r += digits + 2;
        } else {
            *w++ = *r++;
        }
    }
    *w = '\0';
    return s;
}

/* Under mpirun, before anything else reads the options: 0 when every rank gave rank 0's train command (rank_command),
 * else 2 on every rank, the lowest rank that differs saying how (a rank's options decide which collective calls it
 * makes: ranks given different ones would wait on each other forever), or 1 where the comparison failed. */
static int same_rank_command(vt_dist *d, const opts *o) {
    if (d->size <= 1) return 0;
    vt_err e = {0};
    char *mine = rank_command(o), *first = mine;
    size_t len = mine ? strlen(mine) + 1 : 0;
    const int bad = vt_dist_bcast_bytes(d, &first, &len, &e) != 0; /* the others' first: a copy of rank 0's */
    const int differs = !bad && (!mine || !first || strcmp(mine, first) != 0);
    /* a rank of another vitc build: the version leads the command, so it differs in this, the ranks' first exchange
     * (a later check would meet a build whose collective calls differ before it) */
    const int other = differs && mine && first && strncmp(first, mine, strcspn(mine, ":") + 1) != 0;
    const int rc = vt_dist_agree(d, bad || differs, &e);
    if (rc && d->err_reporter && (bad || !mine || !first))
        die("%s", bad ? e.msg : "out of memory");
    else if (rc && d->err_reporter && other)
        say("train", "it runs %.*s and rank 0 %.*s: every rank must run the same vitc build", (int)strcspn(mine, ":"),
            mine, strncmp(first, "vitc ", 5) == 0 ? (int)strcspn(first, ":") : 200,
            strncmp(first, "vitc ", 5) == 0 ? first : "vitc 0.6.7 or earlier (whose train command names no version)");
    else if (rc && d->err_reporter)
        say("train", "its train command differs from rank 0's (rank 0: %s; rank %d: %s): under mpirun every rank runs "
            "the same command, except the paths given to --out, --data, --resume and --init-from and the values of "
            "--threads, --workers and --log-every (a rank given other options would wait forever on the others)",
            readable(first + strcspn(first, ":") + 2), d->rank, readable(mine + strcspn(mine, ":") + 2));
    if (first != mine) free(first);
    free(mine);
    return !rc ? 0 : bad || !mine || !first ? 1 : 2; /* a rank that failed on no account of its own: 2 */
}

int cmd_train(opts *o) {
    vt_err e = {0};
    vt_dist d; /* under mpirun: this rank of the data-parallel run; else one process, MPI untouched */
    if (vt_dist_init(&d, &e)) {
        vt_dist_finalize(&d); /* MPI started, then a check failed: it ends cleanly */
        return die("%s", e.msg);
    }
    share_threads(o, &d);
    /* the ranks' commands compared first: then every check below fails alike on every rank, and rank 0 says why */
    int rc = same_rank_command(&d, o);
    if (rc == 0 && o->recipe && strcmp(o->recipe, "list") == 0)
        rc = list_recipes(o);
    else if (rc == 0 && (rc = train_contradictions(o, &d)) == 0)
        rc = train_rank(o, &d); /* (warns of busy cores once the options are checked) */
    vt_dist_finalize(&d);
    return rc;
}
