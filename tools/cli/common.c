/* The helpers the vitc commands share: messages (say, die, refuse, notice...), the thread setting, the model from
 * the options (model_cfg, load_model), the output check, the dtype report, CSV and JSON strings. */
#include <cblas.h> /* openblas_set_num_threads */
#include <ctype.h>
#include <omp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "vitc/dist.h"
#include "vitc/fileio.h"
#include "vitc/imagefolder.h"
#include "vitc/model.h"
#include "vitc/predict.h"
#include "vitc/safetensors.h"

#include "cli.h"

/* Under mpirun, "rank R: " for the ranks after the first (whose messages the README says are prefixed so); "" else. */
static const char *rank_tag(char *buf, size_t n) {
    int rank = 0;
    vt_dist_env(&rank, NULL, NULL);
    if (rank > 0) snprintf(buf, n, "rank %d: ", rank);
    else if (n) buf[0] = '\0';
    return buf;
}

/* One message line on stderr, written at once (ranks under mpirun share the terminal): "vitc: " or "vitc CMD: " (cmd
 * non-NULL), the rank tag, text (its control characters escaped with clean: names from files) and a newline. */
static void say_text(const char *cmd, int clean, const char *text) {
    char tag[32], lead[96];
    snprintf(lead, sizeof lead, "vitc%s%.40s: %s", cmd ? " " : "", cmd ? cmd : "", rank_tag(tag, sizeof tag));
    vt_write_line(stderr, lead, text, clean);
}

/* say_text of lead and a formatted message, its control characters escaped: the messages hold no intended ones, and
 * names and records from files (a weight file's metadata, classes.json keys) get into some. */
static void say_v(const char *cmd, const char *lead, const char *fmt, va_list ap) {
    char text[4096];
    const int n = snprintf(text, sizeof text, "%s", lead);
    vsnprintf(text + n, sizeof text - (size_t)n, fmt, ap);
    say_text(cmd, 1, text);
}

void say(const char *cmd, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    say_v(cmd, "", fmt, ap);
    va_end(ap);
}

int die(const char *fmt, const char *msg) {
    char line[4096]; /* one line, whatever bytes the names in it hold */
    snprintf(line, sizeof line, fmt, msg);
    say_text(NULL, 1, line);
    return 1;
}

/* 1 on the ranks after the first under mpirun: an error the command line makes is the same on every rank, and rank 0
 * alone prints it (once, not once per rank). */
static int later_rank(void) {
    int rank = 0;
    vt_dist_env(&rank, NULL, NULL);
    return rank > 0;
}

/* say() of an error the command line makes: printed by rank 0 alone under mpirun (later_rank). */
void say_once(const char *cmd, const char *fmt, ...) {
    if (later_rank()) return;
    va_list ap;
    va_start(ap, fmt);
    say_v(cmd, "", fmt, ap);
    va_end(ap);
}

/* die() of an error the command line makes: printed by rank 0 alone under mpirun; returns 1. */
static int die_once(const char *fmt, const char *msg) { return later_rank() ? 1 : die(fmt, msg); }

/* A required argument not given (what: e.g. "--weights"): prints "vitc: missing WHAT" and returns 2, a usage error. */
int missing(const char *what) {
    say_once(NULL, "missing %s", what);
    return 2;
}

int missing_images(void) { return missing("IMAGE (one or more image files after MODEL)"); }

/* An option that can have no effect in command cmd (or an argument it cannot take): prints "vitc CMD: message" and
 * returns 2, the exit status of the other option errors. */
int refuse(const char *cmd, const char *fmt, ...) {
    if (later_rank()) return 2; /* the command line's: printed by rank 0 */
    va_list ap;
    va_start(ap, fmt);
    say_v(cmd, "", fmt, ap);
    va_end(ap);
    return 2;
}

int unknown_model(const char *cmd, const char *name) {
    char hint[128];
    return refuse(cmd, "unknown model '%s' (%ssee `vitc list`)", name, vt_model_hint(name, hint, sizeof hint));
}

/* A one-line "vitc: notice: ..." on stderr: an option that changes nothing here, where refusing it would break
 * scripts that pass it everywhere. */
void notice(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    say_v(NULL, "notice: ", fmt, ap);
    va_end(ap);
}

/* The thread count asked for: --threads, else OMP_NUM_THREADS (its first level: "4,2" asks 4), named in *from; 0 when
 * neither asks (an OMP_NUM_THREADS that is not a count is ignored, with a notice when speak). */
static long asked_threads(const opts *o, const char **from, int speak) {
    const char *env = getenv("OMP_NUM_THREADS");
    *from = "--threads";
    if (o->threads > 0 || !env || !*env) return o->threads > 0 ? o->threads : 0;
    char *end = NULL;
    const long want = strtol(env, &end, 10);
    *from = "OMP_NUM_THREADS";
    while (end != env && isspace((unsigned char)*end)) end++; /* "1 " and "1 ,1": one thread, as libgomp reads them */
    if (end == env || want <= 0 || (*end && *end != ',')) {
        if (speak) say(NULL, "notice: OMP_NUM_THREADS='%s' is not a thread count; ignored", env);
        return 0;
    }
    return want;
}

/* One thread setting for the whole process: --threads, else OMP_NUM_THREADS, else every core it may run on (its
 * affinity mask; of every online core, shared by the `ranks` MPI ranks on this node: cores / ranks each, at least 1;
 * share_threads divides the cores of ranks that share one affinity once MPI has started); more than those cores or
 * than OpenMP allows is clamped with a notice (extra threads only contend for the cores, and an OMP_NUM_THREADS of
 * 100000 crashed inside OpenMP), and OpenMP's dynamic team sizes are turned off. Notices come from the node's first
 * rank alone (the others share its setting). OpenBLAS (OpenMP build) and oneDNN (OpenMP runtime) both run
 * omp_get_max_threads() threads outside our parallel regions and one inside them, so this one setting holds for every
 * GEMM. */
void set_threads(const opts *o) {
    int local_rank = 0, ranks = 1;
    vt_dist_env(NULL, &local_rank, &ranks);
    const int speak = local_rank == 0; /* the node's ranks share one setting: its first says it */
    const long online = sysconf(_SC_NPROCESSORS_ONLN), cores = online > 0 ? online : 1, mine = vt_cpus_usable();
    const char *env = getenv("OMP_NUM_THREADS"), *from;
    long want = asked_threads(o, &from, speak);
    if (want <= 0) {
        want = cores / ranks > 0 ? cores / ranks : 1;
        want = mine < want ? mine : want;
        from = mine < cores ? "the cores this process may use" : "the online cores";
    }
    if (want > mine) {
        char asked[48]; /* as given: strtol caps a longer number at LONG_MAX */
        if (strcmp(from, "OMP_NUM_THREADS") == 0) {
            const int len = (int)strcspn(env, ",");
            snprintf(asked, sizeof asked, "%.*s%s", len < 40 ? len : 37, env, len < 40 ? "" : "...");
        } else {
            snprintf(asked, sizeof asked, "%ld", want);
        }
        if (speak)
            say(NULL, "notice: %s threads asked (%s) but %s %ld core%s%s: using %ld thread%s", asked, from,
                mine < cores ? "this process may run on" : "the machine has", mine, mine == 1 ? "" : "s",
                mine < cores ? " (its CPU affinity)" : " online", mine, mine == 1 ? "" : "s");
        want = mine;
    }
    const int usable = vt_threads_usable((int)want); /* OMP_THREAD_LIMIT, OMP_MAX_ACTIVE_LEVELS=0 */
    if (usable < want) {
        if (speak)
            say(NULL, "notice: %ld threads asked (%s) but OpenMP runs at most %d here (OMP_THREAD_LIMIT or "
                    "OMP_MAX_ACTIVE_LEVELS): using %d", want, from, usable, usable);
        want = usable;
    }
    omp_set_dynamic(0); /* exact teams: OpenBLAS's threaded sgemm hangs in a smaller one (OMP_DYNAMIC=true) */
    omp_set_num_threads((int)want);
    openblas_set_num_threads((int)want);
}

void share_threads(const opts *o, const vt_dist *d) {
    const int n = d->cpu_sharers, mine = vt_cpus_usable();
    int want = omp_get_max_threads();
    if (n <= 1) return;
    const char *from;
    if (asked_threads(o, &from, 0) <= 0 && want > (mine / n > 0 ? mine / n : 1)) { /* the default: divided */
        want = mine / n > 0 ? mine / n : 1;
        if (d->cpu_share_lead)
            say(NULL, "notice: %d ranks on this node share the same %d core%s (their CPU affinity): %d thread%s each",
                n, mine, mine == 1 ? "" : "s", want, want == 1 ? "" : "s");
        omp_set_num_threads(want);
        openblas_set_num_threads(want);
    }
    if ((long)want * n > mine && d->cpu_share_lead)
        say(NULL, "warning: %d ranks x %d threads (%s) exceed the %d core%s they share on this node (their CPU "
            "affinity); they will contend (set --threads)", n, want, want == 1 ? "the minimum" : from, mine,
            mine == 1 ? "" : "s");
}

/* Runnable threads on the machine now (/proc/stat procs_running), or -1 where it cannot be read. */
static int runnable_threads(void) {
    FILE *f = fopen("/proc/stat", "r");
    char line[256];
    int n = -1;
    while (f && n < 0 && fgets(line, sizeof line, f))
        if (sscanf(line, "procs_running %d", &n) != 1) n = -1;
    if (f) fclose(f);
    return n;
}

void warn_busy_cores(void) {
    int local_rank = 0, ranks = 1;
    vt_dist_env(NULL, &local_rank, &ranks);
    const int threads = omp_get_max_threads();
    const long online = sysconf(_SC_NPROCESSORS_ONLN);
    /* under mpirun the node's ranks are each other's competitors: set_threads warns about ranks x threads; a process
     * held to some of the cores (its CPU affinity) cannot tell from the machine's count which of them others use */
    if (ranks > 1 || local_rank != 0 || threads < 2 || online < 1 || vt_cpus_usable() < online ||
        getenv("OMP_WAIT_POLICY"))
        return;
    int others = 1 << 30; /* the fewest of three looks: a competitor that stays runnable, not a passing one */
    for (int k = 0; k < 3 && others > 0; k++) {
        const int n = runnable_threads();
        if (n < 0) return;
        others = n - 1 < others ? n - 1 : others; /* less this process's one running thread */
        if (k < 2) nanosleep(&(struct timespec){0, 5000000}, NULL);
    }
    if (others < 1 || others + threads <= online) return;
    const long spare = online - others > 1 ? online - others : 1;
    say(NULL, "warning: %d other thread%s running on this machine's %ld cores beside vitc's %d: vitc's threads wait "
        "for each other at every op, so one that is descheduled stalls them all (about 2x slower, measured on "
        "DeiT-Ti); give --threads %ld, or set OMP_WAIT_POLICY=passive", others, others == 1 ? " is" : "s are", online,
        threads, spare);
}

/* Checks that o->output may be written before any work: not a special file, not one of the command's inputs
 * (--weights, --input, --classes, the images; with `beside`, the classes.json read beside --weights). Then clears
 * the output's folder of stale temporary files (remove_stale_temps_beside). */
int output_ok(const opts *o, int beside) {
    char side[4096];
    vt_err e = {0}, se = {0}; /* (a classes.json that cannot be told is not read either: nothing to protect) */
    const int found = beside && !o->classes && o->weights ? vt_classes_beside_path(o->weights, side, sizeof side, &se)
                                                          : 0;
    const char *fixed[4] = {o->weights, o->input, o->classes, found > 0 ? side : NULL};
    if (vt_output_check(o->output, fixed, 4, &e) || vt_output_check(o->output, o->images, o->nimages, &e))
        return die("%s", e.msg);
    remove_stale_temps_beside(o->output);
    return 0;
}

/* Removes the temporary files that a vitc killed mid-write (Ctrl-C) left hidden in output's folder, saying so. */
void remove_stale_temps_beside(const char *output) {
    char dir[4096];
    vt_path_dir(output, dir, sizeof dir);
    const int n = vt_remove_stale_temps(dir);
    if (n > 0)
        notice("%s: removed %d temporary file%s of an earlier unfinished write (a vitc killed while writing)", dir, n,
               n == 1 ? "" : "s");
}

/* The overrides options o give a model of `stages` stages (its lists parsed); -1 with the reason in e on a malformed
 * list. */
static int overrides_of(const opts *o, int stages, vt_model_overrides *ov, vt_err *e) {
    *ov = vt_model_no_overrides();
    ov->img_size = o->img_size;
    ov->img_w = o->img_w;
    ov->in_chans = o->in_chans;
    ov->num_classes = o->num_classes;
    ov->attn = o->attn;
    ov->ffn = o->ffn;
    ov->recorded = o->heads_recorded;
    if ((o->dims && vt_model_parse_list("--dims", o->dims, stages, ov->dims, e)) ||
        (o->depths && vt_model_parse_list("--depths", o->depths, stages, ov->depths, e)) ||
        (o->heads && vt_model_parse_list("--heads", o->heads, stages, ov->heads, e)) ||
        (o->windows && vt_model_parse_list("--windows", o->windows, stages, ov->windows, e)))
        return -1;
    ov->windows_listed = o->windows && strchr(o->windows, ',');
    ov->drop_path = (float)o->drop_path; /* -1 when not given: the named config's rate; 0 turns it off */
    ov->cos_reg = o->cos_reg;            /* likewise */
    if (o->crop_pct > 0) ov->crop_pct = (float)o->crop_pct;
    ov->train_form = o->train_form;
    ov->apply_transform = o->apply_transform;
    ov->double_heads = o->double_heads;
    ov->dtype = o->dtype;
    ov->no_prepack = o->no_prepack;
    return 0;
}

void opts_init(opts *o) {
    memset(o, 0, sizeof *o);
    o->wd = o->warmup_epochs = o->min_lr = o->warmup_lr = o->smoothing = o->drop_path = -1;
    o->lr = o->clip = o->mixup = o->cutmix = o->mixup_prob = o->mixup_switch = o->ema_decay = -1;
    o->fault_nan_step = o->fault_batch_step = o->fault_grad_step = o->fault_stop_step = o->fault_nan_eval = -1;
    o->cooldown_epochs = -1;
    o->cos_reg = -1;
}

/* Whether o builds model base without some of its options (each at its unset value, opts_init's): those a file's
 * record gave (recorded 1), or every one the command line gave (recorded 0: --crop-pct and --train-form too, which
 * no record holds). */
static int builds_without(const opts *o, const vt_model_cfg *base, int recorded) {
    opts *a = malloc(2 * sizeof *a), *unset = a + 1;
    if (!a) return -1;
    *a = *o;
    opts_init(unset);
    static const size_t width[] = {[O_STR] = sizeof(char *), [O_INT] = sizeof(int), [O_LL] = sizeof(long long),
                                   [O_DBL] = sizeof(double), [O_FLAG] = sizeof(int)};
    for (size_t k = 0; k < noptdefs && k < sizeof o->recorded; k++) {
        if (!o->given[k] || (o->recorded[k] != 0) != (recorded != 0)) continue;
        const size_t off = optdefs[k].off;
        if (optdefs[k].kind == O_SIZE) a->img_size = a->img_w = 0;
        else memcpy((char *)a + off, (char *)unset + off, width[optdefs[k].kind]);
        if (!strcmp(optdefs[k].name, "--heads")) a->heads_recorded = 0;
    }
    vt_model_overrides ov;
    vt_model_cfg c;
    vt_model_summary s = {0};
    vt_err ae = {0};
    const int builds = overrides_of(a, base->arch.nstages, &ov, &ae) == 0 &&
                       vt_model_configure(base, &ov, &c, &ae) == 0 && vt_model_summarize(&c, &s, &ae) == 0;
    vt_model_summary_free(&s);
    free(a);
    return builds;
}

/* Error e of building model base with o's options: the file's whose record gave some of them when the record's
 * options alone build no model and the command line's alone do (printed naming the file and its record: 1); else the
 * options' usage error (2), also where a record that builds meets a given option that does not fit it. */
static int options_error(const opts *o, const vt_model_cfg *base, const vt_err *e) {
    if (e->code == VT_E_NOMEM || builds_without(o, base, 1) != 1 || builds_without(o, base, 0) != 0)
        return refuse(NULL, "%s", e->msg); /* (nothing recorded: o itself, which failed, is "without the record") */
    char line[4000]; /* die's line holds 4096 bytes */
    snprintf(line, sizeof line, "%.1200s records the model options \"%.1000s\": %.1600s", o->record_path,
             o->record_text, e->msg);
    return die_once("%s", line);
}

/* Resolves the model name and the options that change it into cfg (the library checks them, then builds the model's
 * shapes once); 2 on an unknown model, a malformed list option (--dims, --depths, --heads, --windows) or one the
 * model cannot apply or be built with; 1 on another error, or when the options a file's record gave cause it. */
int model_cfg(opts *o, vt_model_cfg *cfg) {
    if (!o->model) return missing("MODEL (see `vitc list`)");
    const vt_model_cfg *base = vt_model_find(o->model);
    if (!base) return unknown_model(NULL, o->model); /* a usage error, as --attn's */
    vt_model_overrides ov;
    vt_err e = {0};
    if (overrides_of(o, base->arch.nstages, &ov, &e) || vt_model_configure(base, &ov, cfg, &e))
        return options_error(o, base, &e);
    if (o->form_from_file && o->wfile_open > 0 && vt_model_file_in_training_form(cfg, &o->wfile)) {
        cfg->arch.train_form = 1;
        o->train_form = 1; /* a model built again (attention's recorded heads) keeps it; said once */
        const int bn = cfg->family->caps & VT_CAP_FORM_RECORD, branches = vt_ffn_find(cfg->arch.ffn)->reparam;
        notice("%s holds the training form (%s%s%s): the model is built in it (--train-form); `vitc deploy` makes "
               "the deployed form, faster at inference", o->weights, bn ? "BatchNorms not merged" : "",
               bn && branches ? ", " : "", branches ? "cFFN's branches" : "");
    }
    if (o->features && !cfg->family->features)
        return refuse(NULL, "%s has no stage feature maps (--features)", cfg->name);
    vt_model_summary sum; /* options a block refuses as the model is built (gma after a class token): usage too */
    if (vt_model_summarize(cfg, &sum, &e))
        return e.code == VT_E_USAGE ? options_error(o, base, &e) : die_once("%s", e.msg);
    vt_model_summary_free(&sum);
    return 0;
}

/* Frees the --weights file weights_options read, once its values are loaded. */
void close_weights(opts *o) {
    if (o->wfile_open > 0) vt_st_close(&o->wfile);
    o->wfile_open = 0;
}

/* A parameter store holding the model's parameters, loaded from o->weights or, without it, initialised (seed); the
 * commands that need weights refuse a missing --weights first (a usage error). */
vt_params *load_model(opts *o, const vt_model_cfg *cfg) {
    vt_err e = {0};
    if (o->weights && o->wfile_open < 0) { /* read once: a stream would be empty the second time */
        die("--weights: %s", o->werr.msg);
        return NULL;
    }
    vt_params *P = !o->weights          ? vt_params_new(&e)
                   : o->wfile_open > 0 ? vt_model_load_file(cfg, &o->wfile, o->weights, &e)
                                       : vt_model_load(cfg, o->weights, &e);
    close_weights(o);
    if (P && !o->weights && vt_model_init_params(cfg, P, (uint64_t)o->seed, &e)) {
        vt_params_free(P);
        P = NULL;
    }
    if (!P) die("%s", e.msg);
    return P;
}

/* The arithmetic eval and bench report when --dtype int8 ran no layer in int8, or --dtype bf16 no product in bf16. */
#define INT8_NONE "fp32 (int8 requested; no layer ran int8)"
#define BF16_NONE "fp32 (bf16 requested; no product ran bf16)"

/* The arithmetic eval and bench report for c: its --dtype when that ran (ran: some layer or product did), else fp32
 * with what was asked for. */
const char *dtype_label(const vt_model_cfg *c, int ran) {
    if (!c->arch.int8 && !c->arch.bf16) return "fp32";
    return ran ? (c->arch.int8 ? "int8" : "bf16") : c->arch.int8 ? INT8_NONE : BF16_NONE;
}

/* Warns on stderr when c asks for int8 but u, what the graph that ran used, has no linear layer on the int8 kernel,
 * or for bf16 but no product ran bf16; returns 1 then. */
int warn_dtype_fallback(const vt_model_cfg *c, vt_dtype_use u) {
    char msg[400];
    if (!vt_dtype_fallback(c, u, msg, sizeof msg)) return 0;
    fprintf(stderr, "vitc: warning: %s\n", msg);
    return 1;
}

/* Prints s as a CSV field (quoted when it holds a comma, a quote or a line break). */
void csv_str(const char *s) {
    if (!strpbrk(s, ",\"\r\n")) {
        fputs(s, stdout);
        return;
    }
    putchar('"');
    for (; *s; s++) {
        if (*s == '"') putchar('"');
        putchar(*s);
    }
    putchar('"');
}

/* Prints s as a JSON string (quoted, with quotes, backslashes and control characters escaped). */
void json_str(const char *s) {
    putchar('"');
    const size_t n = strlen(s);
    size_t bad = 0; /* where the next byte outside valid UTF-8 is (n: none), found from i when i has passed it */
    for (size_t i = 0; i < n; i++) {
        if (i == 0 || bad < i) {
            size_t off = 0;
            bad = vt_utf8_valid((const uint8_t *)s + i, n - i, &off) ? n : i + off;
        }
        if (i == bad) {
            printf("\\ufffd"); /* a byte outside valid UTF-8 (a file name's, a cut message's): JSON stays valid */
            continue;
        }
        if (s[i] == '"' || s[i] == '\\')
            printf("\\%c", s[i]);
        else if ((unsigned char)s[i] < 0x20)
            printf("\\u%04x", (unsigned char)s[i]);
        else
            putchar(s[i]);
    }
    putchar('"');
}
