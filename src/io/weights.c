/* Parameter-store load/save through the strict safetensors reader, and CLI tensor-file helpers. */
#include "vitc/weights.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LIST_MAX 10 /* names listed per category in a mismatch message */

/* One category of problems ("missing", ...) collected into a text list. */
typedef struct {
    char text[1024];
    size_t len;
    int count;
} problem_list;

static void list_add(problem_list *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void list_add(problem_list *l, const char *fmt, ...) {
    l->count++;
    if (l->count > LIST_MAX || l->len >= sizeof l->text - 1) return;
    if (l->count > 1 && l->len < sizeof l->text - 1)
        l->len += (size_t)snprintf(l->text + l->len, sizeof l->text - l->len, ", ");
    if (l->len >= sizeof l->text - 1) return;
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(l->text + l->len, sizeof l->text - l->len, fmt, ap);
    va_end(ap);
    if (k > 0) l->len += (size_t)k;
    if (l->len > sizeof l->text - 1) l->len = sizeof l->text - 1;
}

/* Appends "; <label>: <names>[ and N more]" to buf when the list is non-empty. */
static size_t list_emit(char *buf, size_t cap, size_t o, const char *label, const problem_list *l) {
    if (!l->count || o >= cap) return o;
    o += (size_t)snprintf(buf + o, cap - o, "; %s: %s", label, l->text);
    if (o < cap && l->count > LIST_MAX) o += (size_t)snprintf(buf + o, cap - o, " and %d more", l->count - LIST_MAX);
    return o;
}

static const char *file_shape(const vt_st_entry *t, char *buf, size_t len) {
    size_t o = (size_t)snprintf(buf, len, "(");
    for (int i = 0; i < t->ndim && o < len; i++)
        o += (size_t)snprintf(buf + o, len - o, i ? ", %lld" : "%lld", (long long)t->shape[i]);
    if (o < len) snprintf(buf + o, len - o, ")");
    return buf;
}

static int dtype_ok(const vt_tensor *t, vt_st_dtype d) {
    if (d == VT_ST_F32 || d == VT_ST_F16 || d == VT_ST_BF16) return 1;
    return d == VT_ST_I64 && t->kind == VT_BUFFER && t->is_i64;
}

/* 1 when file f holds a re-parameterised branch (a `.rep.` name): the training form of cFFN. */
int vt_weights_has_branches(const vt_st_file *f) {
    for (int i = 0; i < f->n; i++)
        if (strstr(f->entries[i].name, ".rep.")) return 1;
    return 0;
}

static int file_has(const void *f, const char *name) { return vt_st_find(f, name) != NULL; }

/* 1 when `name` is a re-parameterised branch tensor (PREFIX.rep.…) whose merge, PREFIX.weight, `has` says exists on the
 * other side (the file's or the model's). */
static int merge_of_rep_exists(const char *name, int (*has)(const void *, const char *), const void *side) {
    const char *r = strstr(name, ".rep.");
    char merged[256];
    if (!r || (size_t)(r - name) + sizeof ".weight" > sizeof merged) return 0;
    snprintf(merged, sizeof merged, "%.*s.weight", (int)(r - name), name);
    return has(side, merged);
}

int vt_weights_rep_merged_in(const char *name, const vt_st_file *f) { return merge_of_rep_exists(name, file_has, f); }

/* 1 when `name` is a factor of cFFN's deployed FFN (PREFIX_u.… or PREFIX_v.…) whose plain counterpart (PREFIX.…, an
 * MLP's layer) `has` says exists on the other side. */
static int plain_of_factor_exists(const char *name, int (*has)(const void *, const char *), const void *side) {
    const char *dot = strrchr(name, '.');
    char plain[256];
    if (!dot || dot - name < 2 || dot[-2] != '_' || (dot[-1] != 'u' && dot[-1] != 'v') || strlen(name) >= sizeof plain)
        return 0;
    snprintf(plain, sizeof plain, "%.*s%s", (int)(dot - 2 - name), name, dot);
    return has(side, plain);
}

/* 1 when name is a factor of cFFN's deployed FFN (PREFIX_u.… or PREFIX_v.…). */
static int is_factor(const char *name) {
    const char *dot = strrchr(name, '.');
    return dot && dot - name >= 2 && dot[-2] == '_' && (dot[-1] == 'u' || dot[-1] == 'v');
}

int vt_weights_may_be_absent(const vt_tensor *t) {
    const size_t n = strlen(t->name), k = strlen(".num_batches_tracked");
    return t->init.kind == VT_INIT_FIXED || (n >= k && strcmp(t->name + n - k, ".num_batches_tracked") == 0);
}

static int model_has(const void *P, const char *name) { return vt_params_find(P, name) != NULL; }

/* 0 if file f may be loaded into P's form, else -1 with a message: a file records its form in __metadata__
 * VT_FORM_KEY; files without the record (official checkpoints, converted files) hold the training form, except those
 * of a cFFN model without `.rep.` branches (merged: the deployed form). */
static int check_form(const vt_params *P, const vt_st_file *f, const char *path, vt_err *e) {
    if (!P->form) return 0;
    const char *rec = vt_st_meta(f, VT_FORM_KEY), *form = rec ? rec : "training";
    if (strcmp(form, P->form) == 0) return 0;
    if (!rec && P->reparam && !vt_weights_has_branches(f)) return 0; /* merged branches, record dropped: deployed */
    if (strcmp(form, "training") != 0 && strcmp(form, "deployed") != 0)
        return vt_seterr(e, "%s records an unknown form '%.40s' (metadata %s)", path, form, VT_FORM_KEY);
    if (strcmp(P->form, "deployed") == 0)
        return vt_seterr(e, "%s %s, but the model is built in its deployed form, which skips the BatchNorms that "
                         "merge_bn folds into the next layers: merge the file with `vitc deploy`, or load it with "
                         "--train-form", path, rec ? "holds training-form weights (metadata " VT_FORM_KEY ")"
                         : "has no " VT_FORM_KEY " record, so it holds training-form weights (official checkpoints and "
                         "converted files are the training form; one saved after the official merge_bn: convert it "
                         "with convert_checkpoint.py --form deployed)");
    return vt_seterr(e, "%s holds deployed-form weights (metadata %s: BatchNorms already merged by merge_bn), but the "
                     "model is built in its training form, which would apply them twice: forward, eval, predict and "
                     "attention take it without --train-form; deploy, grad and training need a training-form file",
                     path, VT_FORM_KEY);
}

/* The per-stage list f records under key (NULL when none, or when it equals mine, P's); -1 with a message when it is
 * not a list of numbers as vitc writes them (`what` names them). */
static int recorded_list(const vt_st_file *f, const char *path, const char *key, const char *mine, const char *what,
                         const char **rec, vt_err *e) {
    *rec = vt_st_meta(f, key);
    if (!*rec || !mine[0] || strcmp(*rec, mine) == 0) return *rec = NULL, 0;
    int ok = (*rec)[0] >= '0' && (*rec)[0] <= '9'; /* numbers, comma-separated */
    for (const char *p = *rec; ok && *p; p++) ok = (*p >= '0' && *p <= '9') || (*p == ',' && p[1] && p[1] != ',');
    return ok ? 0
              : vt_seterr(e, "%s: its %s metadata \"%.40s\" is not a list of %s: not a file vitc wrote", path, key,
                          *rec, what);
}

int vt_weights_check_heads(const vt_params *P, const vt_st_file *f, const char *path, vt_err *e) {
    const char *rec;
    if (recorded_list(f, path, VT_HEADS_KEY, P->heads, "head counts", &rec, e) || !rec) return rec ? -1 : 0;
    return vt_seterr(e, "%s was made for %.40s attention heads (per stage, as run; metadata %s) but the model is "
                     "built with %s: its maps would split into other heads; build it as it was made (--heads, and "
                     "--double-heads where it was)", path, rec, VT_HEADS_KEY, P->heads);
}

/* 1 when f records an attention list (VT_ATTN_KEY) other than P's, pointing *rec at it; 0 when it records none or
 * P's; -1 with a message when the record is not a list of names as vitc writes them. */
static int other_attn(const vt_params *P, const vt_st_file *f, const char *path, const char **rec, vt_err *e) {
    *rec = vt_st_meta(f, VT_ATTN_KEY);
    if (!*rec || !P->attn[0] || strcmp(*rec, P->attn) == 0) return 0;
    int ok = (*rec)[0] >= 'a' && (*rec)[0] <= 'z' && strlen(*rec) < sizeof P->attn; /* names, comma-separated */
    for (const char *p = *rec; ok && *p; p++)
        ok = (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '_' ||
             (*p == ',' && p[1] >= 'a' && p[1] <= 'z');
    return ok ? 1
              : vt_seterr(e, "%s: its %s metadata \"%.40s\" is not a list of attention names: not a file vitc wrote",
                          path, VT_ATTN_KEY, *rec);
}

/* The commas in s: a per-stage list's stages less one. */
static int commas(const char *s) {
    int n = 0;
    for (; *s; s++) n += *s == ',';
    return n;
}

int vt_weights_check_attn(const vt_params *P, const vt_st_file *f, const char *path, vt_err *e) {
    const char *rec;
    const int o = other_attn(P, f, path, &rec, e);
    if (o <= 0) return o;
    return vt_seterr(e, "%s was made with attention %.127s (per stage; metadata %s) but the model is built with %s: "
                     "the same tensors in another network (grouped projections keep their channels in another order); "
                     "build it as it was made (--attn)", path, rec, VT_ATTN_KEY, P->attn);
}

int vt_weights_check_windows(const vt_params *P, const vt_st_file *f, const char *path, vt_err *e) {
    const char *rec;
    if (recorded_list(f, path, VT_WINDOWS_KEY, P->windows, "window sizes", &rec, e) || !rec) return rec ? -1 : 0;
    return vt_seterr(e, "%s was made with attention windows (Swin) or stripe widths (CSwin) %.40s (per stage; "
                     "metadata %s) but the model is built with %s: build it as it was made (--windows %.40s)", path,
                     rec, VT_WINDOWS_KEY, P->windows, rec);
}

int vt_is_running_var(const char *name) {
    const size_t n = strlen(name), k = strlen(".running_var");
    return n >= k && strcmp(name + n - k, ".running_var") == 0;
}

/* 0 when vals (t->numel floats, file entry `name` of path) may be t's value: finite, a running variance >= 0, a fixed
 * buffer equal to t's definition; else -1 with a message naming the element. */
static int check_values(const vt_tensor *t, const char *name, const float *vals, const char *path, vt_err *e) {
    for (int64_t j = 0; j < t->numel; j++) {
        if (!isfinite(vals[j]))
            return vt_seterr(e, "%s: tensor '%s' holds %s at element %lld; weights must be finite", path, name,
                             isnan(vals[j]) ? "NaN" : "Inf", (long long)j);
        if (vals[j] < 0.0f && vt_is_running_var(t->name))
            return vt_seterr(e, "%s: tensor '%s' holds %g at element %lld; a BatchNorm's running variance must be >= 0",
                             path, name, (double)vals[j], (long long)j);
        if (t->init.kind == VT_INIT_FIXED && vals[j] != t->data[j])
            return vt_seterr(e, "%s: buffer '%s' element %lld is %g but the architecture defines %g (a buffer derived "
                             "from the configuration, e.g. a window size or image size that differs from the model's)",
                             path, name, (long long)j, (double)vals[j], (double)t->data[j]);
    }
    return 0;
}

int vt_param_read(const vt_st_file *f, const char *name, const vt_tensor *t, float *dst, const char *path, vt_err *e) {
    const vt_st_entry *s = vt_st_find(f, name);
    if (!s) return vt_seterr(e, "%s lacks tensor %s", path, name);
    int same = s->ndim == t->ndim;
    for (int d = 0; same && d < t->ndim; d++) same = s->shape[d] == t->shape[d];
    char a[160], b[160];
    if (!same)
        return vt_seterr(e, "%s: tensor %s has shape %s, the model's %s has %s", path, name,
                         file_shape(s, a, sizeof a), t->name, vt_shape_str(t, b, (int)sizeof b));
    if (!dtype_ok(t, s->dtype))
        return vt_seterr(e, "%s: tensor %s is %s (want F32/F16/BF16, or I64 for integer buffers)", path, name,
                         vt_st_dtype_name(s->dtype));
    float *tmp = vt_alloc(sizeof(float) * (size_t)(t->numel ? t->numel : 1), e);
    int rc = tmp ? vt_st_read_f32(s, tmp, t->numel, e) : -1;
    if (rc == 0) rc = check_values(t, name, tmp, path, e);
    if (rc == 0) memcpy(dst, tmp, sizeof(float) * (size_t)t->numel);
    vt_free(tmp);
    return rc;
}

int64_t *vt_param_i64(const vt_tensor *t, const char *path, vt_err *e) {
    int64_t *v = vt_alloc(sizeof(int64_t) * (size_t)(t->numel ? t->numel : 1), e);
    for (int64_t j = 0; v && j < t->numel; j++) {
        const float x = t->data[j];
        if (!(x > -9.2e18f && x < 9.2e18f)) {
            vt_seterr(e, "%s: buffer '%s' element %lld = %g does not fit in I64", path, t->name, (long long)j,
                      (double)x);
            vt_free(v);
            return NULL;
        }
        v[j] = (int64_t)llrintf(x);
    }
    return v;
}

int vt_params_check_file(const vt_params *P, const vt_st_file *f, const char *path, vt_err *e) {
    if (vt_params_check_tensors(P, f, path, e)) return -1;
    /* the tensors fit: the heads and windows they were made for must too */
    return vt_weights_check_heads(P, f, path, e) || vt_weights_check_windows(P, f, path, e) ||
                   vt_weights_check_attn(P, f, path, e)
               ? -1
               : 0;
}

int vt_params_check_tensors(const vt_params *P, const vt_st_file *f, const char *path, vt_err *e) {
    char brief[VT_PATH_BRIEF]; /* the file's name leaves room for the cause and the names */
    path = vt_path_brief(path, brief, sizeof brief);
    if (check_form(P, f, path, e)) return -1;
    problem_list missing = {{0}, 0, 0}, extra = {{0}, 0, 0}, shape = {{0}, 0, 0}, dtype = {{0}, 0, 0};
    /* re-parameterised branches (cFFN's `.rep.`) on either side, and those whose merge the other side holds; cFFN's
     * factors (`_u`, `_v`) likewise; a training checkpoint's optimiser state */
    int rep_missing = 0, rep_extra = 0, merged_in_file = 0, merged_in_model = 0, factors_missing = 0, factors_extra = 0;
    int model_rep = 0, model_factors = 0, file_factors = 0, optim = 0;
    const int file_rep = vt_weights_has_branches(f);
    for (int i = 0; i < P->n; i++) {
        model_rep |= strstr(P->t[i]->name, ".rep.") != NULL;
        model_factors |= is_factor(P->t[i]->name);
    }
    for (int i = 0; i < f->n; i++) file_factors |= is_factor(f->entries[i].name);
    for (int i = 0; i < P->n; i++) {
        const vt_tensor *t = P->t[i];
        const vt_st_entry *s = vt_st_find(f, t->name);
        if (!s && vt_weights_may_be_absent(t)) continue;
        if (!s) {
            list_add(&missing, "%s", t->name);
            rep_missing += strstr(t->name, ".rep.") != NULL;
            merged_in_file += merge_of_rep_exists(t->name, file_has, f);
            factors_missing += plain_of_factor_exists(t->name, file_has, f);
            continue;
        }
        int same = s->ndim == t->ndim;
        for (int d = 0; same && d < t->ndim; d++) same = s->shape[d] == t->shape[d];
        if (!same) {
            char a[160], b[160];
            list_add(&shape, "%s (file %s vs model %s)", t->name, file_shape(s, a, sizeof a),
                     vt_shape_str(t, b, (int)sizeof b));
        }
        if (!dtype_ok(t, s->dtype)) list_add(&dtype, "%s (%s)", t->name, vt_st_dtype_name(s->dtype));
    }
    for (int i = 0; i < f->n; i++)
        if (!vt_params_find(P, f->entries[i].name)) {
            list_add(&extra, "%s", f->entries[i].name);
            optim += strncmp(f->entries[i].name, "optim/", 6) == 0;
            rep_extra += strstr(f->entries[i].name, ".rep.") != NULL;
            merged_in_model += merge_of_rep_exists(f->entries[i].name, model_has, P);
            factors_extra += plain_of_factor_exists(f->entries[i].name, model_has, P);
        }

    if (missing.count || extra.count || shape.count || dtype.count) {
        char msg[4096];
        /* the first words say it when re-parameterised blocks differ: in form (a branch on one side, its merge on the
         * other) or in presence (cFFN on one side only) */
        /* each hint only where the sides differ in that respect as a whole: a file short of one branch tensor, or
         * another model's file, is named by its lists alone */
        char made[640] = ""; /* a file vitc wrote for other attention, as many stages: the way out */
        const char *rec;
        vt_err scratch = {0};
        if (other_attn(P, f, path, &rec, &scratch) == 1 && commas(rec) == commas(P->attn))
            snprintf(made, sizeof made, ". It was made with attention %.127s (metadata %s), the model is built with "
                     "%s: build it as it was made (--attn %.127s)", rec, VT_ATTN_KEY, P->attn, rec);
        merged_in_file *= !file_rep, rep_missing *= !file_rep, merged_in_model *= !model_rep;
        rep_extra *= !model_rep, factors_missing *= !file_factors, factors_extra *= !model_factors;
        const char *form =
            optim          ? ". It is a training checkpoint (its optimiser state, `optim/`, is not a model's): give "
                             "the run's weights.safetensors or weights_best.safetensors"
            : merged_in_file ? ". It holds the deployed form of re-parameterised blocks (`.rep.` branches merged by "
                             "`vitc deploy`) and the model is built in their training form, which deploy, grad and "
                             "training need: use a training-form file; forward, eval, predict and attention take this "
                             "one without --train-form"
            : merged_in_model ? ". It holds the training form of re-parameterised blocks (`.rep.` branches) and the "
                                "model is their deployed form: merge it with `vitc deploy`, or load it with --train-form"
            : rep_extra       ? ". It holds cFFN branches (`.rep.`) and the model has no cFFN: build it as the file was "
                                "made (--ffn cffn)"
            : rep_missing     ? ". The model's cFFN branches (`.rep.`) are not in the file, nor their merges: the file "
                                "was made without cFFN (build it with --ffn mlp)"
            : factors_extra   ? ". It holds cFFN's factorised layers (`_u`, `_v`) where the model has a plain MLP: build "
                                "it as the file was made (--ffn cffn)"
            : factors_missing ? ". The model's cFFN layers (`_u`, `_v`) are a plain MLP's in the file: the file was made "
                                "without cFFN (build it with --ffn mlp)"
                              : made;
        /* with a hint, the hint first and the file after it: a message cut to fit (vt_msg_vformat, 508 bytes in
         * vitc_error) keeps its start, and the hint is the way out */
        size_t o = form[0] ? (size_t)snprintf(msg, sizeof msg,
                                              "weights do not match the model%s (%s: missing %d, unexpected %d, shape "
                                              "mismatch %d, unsupported dtype %d)",
                                              form, path, missing.count, extra.count, shape.count, dtype.count)
                           : (size_t)snprintf(msg, sizeof msg,
                                              "%s: weights do not match the model (missing %d, unexpected %d, shape "
                                              "mismatch %d, unsupported dtype %d)",
                                              path, missing.count, extra.count, shape.count, dtype.count);
        if (!optim) { /* a checkpoint's lists (its optimiser and EMA tensors) say nothing the hint does not */
            o = list_emit(msg, sizeof msg, o, "missing", &missing);
            o = list_emit(msg, sizeof msg, o, "unexpected", &extra);
            o = list_emit(msg, sizeof msg, o, "shape mismatch", &shape);
            list_emit(msg, sizeof msg, o, "unsupported dtype (want F32/F16/BF16, or I64 for integer buffers)", &dtype);
        }
        return vt_seterr(e, "%s", msg);
    }
    return 0;
}

int vt_params_load_file(vt_params *P, const vt_st_file *f, const char *path, vt_err *e) {
    vt_params_changed(P);
    if (vt_params_check_file(P, f, path, e)) return -1;
    const char *data = vt_st_meta(f, VT_DATA_KEY);
    P->folder = data && strcmp(data, "folder") == 0;
    char brief[VT_PATH_BRIEF];
    path = vt_path_brief(path, brief, sizeof brief);
    /* Values: every tensor finite, every running variance >= 0 and every fixed buffer equal to its definition, checked tensor by tensor in a
     * scratch buffer before anything is copied into P. */
    int64_t most = 1;
    for (int i = 0; i < P->n; i++) most = P->t[i]->numel > most ? P->t[i]->numel : most;
    float *tmp = vt_alloc(sizeof(float) * (size_t)most, e);
    int rc = tmp ? 0 : -1;
    for (int i = 0; i < P->n && rc == 0; i++) {
        const vt_tensor *t = P->t[i];
        const vt_st_entry *s = vt_st_find(f, t->name);
        if (!s) continue; /* vt_weights_may_be_absent (checked) */
        rc = vt_st_read_f32(s, tmp, t->numel, e);
        if (rc == 0) rc = check_values(t, t->name, tmp, path, e);
    }
    vt_free(tmp);
    /* everything checked: only a file changed meanwhile fails now, its values checked again as they are copied (a fixed
     * buffer equals its definition already) */
    for (int i = 0; i < P->n && rc == 0; i++) {
        vt_tensor *t = P->t[i];
        const vt_st_entry *s = vt_st_find(f, t->name);
        if (t->init.kind == VT_INIT_FIXED) continue;
        if (!s) { /* a BatchNorm's counter */
            vt_zero(t->data, t->numel);
            continue;
        }
        rc = vt_st_read_f32(s, t->data, t->numel, e);
        vt_err ce = {0};
        if (rc == 0 && check_values(t, t->name, t->data, path, &ce))
            rc = vt_seterr(e, "%s, a value it did not hold when first read: the file changed while it was loaded, and "
                           "the model's weights are partly overwritten", ce.msg);
    }
    return rc;
}

int vt_params_load(vt_params *P, const char *path, vt_err *e) {
    vt_st_file f;
    if (vt_st_open(path, &f, e) != 0) return -1;
    const int rc = vt_params_load_file(P, &f, path, e);
    vt_st_close(&f);
    return rc;
}

int vt_params_save(const vt_params *P, const char *path, vt_err *e) {
    int n = P->n;
    vt_st_out *outs = calloc(n ? (size_t)n : 1, sizeof *outs);
    int64_t **ibufs = calloc(n ? (size_t)n : 1, sizeof *ibufs);
    int rc = -1;
    if (!outs || !ibufs) {
        vt_seterr_code(e, VT_E_NOMEM, "out of memory saving %s", path);
        goto done;
    }
    for (int i = 0; i < n; i++) {
        const vt_tensor *t = P->t[i];
        vt_st_out *o = &outs[i];
        o->name = t->name;
        o->ndim = t->ndim;
        for (int d = 0; d < t->ndim; d++) o->shape[d] = t->shape[d];
        if (t->is_i64) {
            if (!(ibufs[i] = vt_param_i64(t, path, e))) goto done;
            o->dtype = VT_ST_I64;
            o->data = ibufs[i];
        } else {
            o->dtype = VT_ST_F32;
            o->data = t->data;
        }
    }
    /* room for every field at its longest (model under 64 bytes, the epoch a 64-bit number) and the keys' text, so
     * that no snprintf below is cut short and len never passes the buffer's end */
    char meta[2048];
    _Static_assert(sizeof P->options + sizeof P->heads + sizeof P->windows + sizeof P->attn + 64 + 24 + 512 <=
                       sizeof meta, "metadata buffer too small");
    int len = snprintf(meta, sizeof meta, "{\"format\":\"pt\"");
    if (P->model && strlen(P->model) < 64 && !strpbrk(P->model, "\"\\"))
        len += snprintf(meta + len, sizeof meta - (size_t)len, ",\"%s\":\"%s\"", VT_MODEL_KEY, P->model);
    if (P->options[0] && !strpbrk(P->options, "\"\\")) /* names and numbers (as vt_model_configure writes them) */
        len += snprintf(meta + len, sizeof meta - (size_t)len, ",\"%s\":\"%s\"", VT_OPTIONS_KEY, P->options);
    if (P->form) len += snprintf(meta + len, sizeof meta - (size_t)len, ",\"%s\":\"%s\"", VT_FORM_KEY, P->form);
    if (P->heads[0])
        len += snprintf(meta + len, sizeof meta - (size_t)len, ",\"%s\":\"%s\"", VT_HEADS_KEY, P->heads);
    if (P->windows[0])
        len += snprintf(meta + len, sizeof meta - (size_t)len, ",\"%s\":\"%s\"", VT_WINDOWS_KEY, P->windows);
    if (P->attn[0]) len += snprintf(meta + len, sizeof meta - (size_t)len, ",\"%s\":\"%s\"", VT_ATTN_KEY, P->attn);
    if (P->epoch > 0) len += snprintf(meta + len, sizeof meta - (size_t)len, ",\"%s\":\"%lld\"", VT_EPOCH_KEY, P->epoch);
    if (P->folder) len += snprintf(meta + len, sizeof meta - (size_t)len, ",\"%s\":\"folder\"", VT_DATA_KEY);
    snprintf(meta + len, sizeof meta - (size_t)len, "}");
    rc = vt_st_write(path, outs, n, meta, e);
done:
    if (ibufs)
        for (int i = 0; i < n; i++) vt_free(ibufs[i]);
    free(ibufs);
    free(outs);
    return rc;
}

int vt_st_read_named(const vt_st_file *f, const char *name, float **out, int *ndim, int64_t *shape, vt_err *e) {
    *out = NULL;
    const vt_st_entry *t = vt_st_find(f, name);
    if (!t) return vt_seterr(e, "tensor '%s' not found in file", name);
    if (*ndim >= 0 && t->ndim != *ndim) {
        char b[160];
        return vt_seterr(e, "tensor '%s' has %d dims %s, expected %d", name, t->ndim, file_shape(t, b, sizeof b), *ndim);
    }
    float *p = vt_alloc(sizeof(float) * (size_t)t->numel, e);
    if (!p) return -1;
    if (vt_st_read_f32(t, p, t->numel, e) != 0) {
        vt_free(p);
        return -1;
    }
    *ndim = t->ndim;
    for (int i = 0; i < t->ndim; i++) shape[i] = t->shape[i];
    *out = p;
    return 0;
}

int vt_st_read_labels(const vt_st_file *f, const char *name, int32_t **out, int64_t *n, vt_err *e) {
    *out = NULL;
    *n = 0;
    const vt_st_entry *t = vt_st_find(f, name);
    if (!t) return vt_seterr(e, "tensor '%s' not found in file", name);
    if (t->ndim != 1)
        return vt_seterr(e, "tensor '%s' has %d dimensions; labels are one per sample, shape (B,)", name, t->ndim);
    int64_t *tmp = vt_alloc(sizeof(int64_t) * (size_t)t->numel, e);
    if (!tmp) return -1;
    if (vt_st_read_i64(t, tmp, t->numel, e) != 0) {
        vt_free(tmp);
        return -1;
    }
    int32_t *p = vt_alloc(sizeof(int32_t) * (size_t)t->numel, e);
    if (!p) {
        vt_free(tmp);
        return -1;
    }
    for (int64_t i = 0; i < t->numel; i++) {
        if (tmp[i] < INT32_MIN || tmp[i] > INT32_MAX) {
            vt_seterr(e, "tensor '%s': label %lld = %lld does not fit in int32", name, (long long)i, (long long)tmp[i]);
            vt_free(tmp);
            vt_free(p);
            return -1;
        }
        p[i] = (int32_t)tmp[i];
    }
    vt_free(tmp);
    *out = p;
    *n = t->numel;
    return 0;
}

int vt_params_save_grads(const vt_params *P, const char *path, const float *losses, int steps, vt_err *e) {
    vt_st_out *out = calloc((size_t)P->n + 2, sizeof *out);
    char(*names)[VT_NAMELEN + 8] = calloc((size_t)P->n + 1, VT_NAMELEN + 8);
    int n = 0, rc = -1;
    if (!out || !names) {
        vt_seterr_code(e, VT_E_NOMEM, "out of memory saving %s", path);
    } else {
        const int64_t k = vt_first_nonfinite(losses, steps);
        if (k >= 0) {
            vt_seterr(e, "the loss of step %lld is %s: the input or the weights overflow float32 (%s not written)",
                      (long long)k + 1, isnan(losses[k]) ? "NaN" : "infinite", path);
            goto done;
        }
        out[n++] = (vt_st_out){"loss", VT_ST_F32, 0, {0}, &losses[steps - 1]};
        if (steps > 1) out[n++] = (vt_st_out){"losses", VT_ST_F32, 1, {steps}, losses};
        for (int i = 0; i < P->n; i++) {
            const vt_tensor *t = P->t[i];
            if (t->kind != VT_PARAM || !t->requires_grad) continue; /* frozen: no gradient */
            if (!t->grad) {
                vt_seterr(e, "parameter '%s' has no gradient to save", t->name);
                goto done;
            }
            if (vt_first_nonfinite(t->grad, t->numel) >= 0) {
                vt_seterr(e, "the gradient of '%s' is NaN or Inf: the input or the weights overflow float32 (%s "
                          "not written)", t->name, path);
                goto done;
            }
            snprintf(names[i], VT_NAMELEN + 8, "grad/%s", t->name);
            out[n] = (vt_st_out){names[i], VT_ST_F32, t->ndim, {0}, t->grad};
            for (int d = 0; d < t->ndim; d++) out[n].shape[d] = t->shape[d];
            n++;
        }
        rc = vt_st_write(path, out, n, NULL, e);
    }
done:
    free(out);
    free(names);
    return rc;
}
