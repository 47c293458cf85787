/* The registry of host families and named models, and the generic model entry points (configure, build, init,
 * deploy, summaries). Nothing here knows a family by name: families differ only through their hooks. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "family.h"
#include "vitc/image.h"
#include "vitc/ops.h"

/* Every host family; add a family with one line here. */
static const vt_family *const families[] = {
    &vt_family_vit,
    &vt_family_groupmixformer,
    &vt_family_refined_vit,
    &vt_family_simplevit,
    &vt_family_swin,
    &vt_family_swin_tv,
    &vt_family_cswin,
    &vt_family_pvt,
    &vt_family_nextvit,
};
#define NFAMILIES VT_COUNT(families)

int vt_model_count(void) {
    int n = 0;
    for (int f = 0; f < NFAMILIES; f++) n += families[f]->nmodels;
    return n;
}

const vt_model_cfg *vt_model_at(int i) {
    for (int f = 0; f < NFAMILIES && i >= 0; f++) {
        if (i < families[f]->nmodels) return &families[f]->models[i];
        i -= families[f]->nmodels;
    }
    return NULL;
}

const vt_model_cfg *vt_model_find(const char *name) {
    for (int i = 0; name && i < vt_model_count(); i++) {
        const vt_model_cfg *c = vt_model_at(i);
        if (strcmp(c->name, name) == 0 || (c->alias && strcmp(c->alias, name) == 0)) return c;
    }
    return NULL;
}

const char *vt_model_hint(const char *name, char *buf, size_t n) {
    vt_nearest s = {.word = name};
    for (int i = 0; i < vt_model_count(); i++) {
        const vt_model_cfg *c = vt_model_at(i);
        vt_nearest_try(&s, c->name, strlen(c->name));
        if (c->alias) vt_nearest_try(&s, c->alias, strlen(c->alias));
    }
    return vt_nearest_hint(&s, buf, n);
}

vt_model_overrides vt_model_no_overrides(void) {
    vt_model_overrides o;
    memset(&o, 0, sizeof o);
    o.drop_path = -1.0f;
    o.cos_reg = -1;
    return o;
}

void vt_model_unblank_list(char *list) {
    char *w = list;
    for (const char *r = list; *r; r++)
        if (!strchr(" \t\n", *r)) *w++ = *r;
    *w = '\0';
}

int vt_model_parse_list(const char *opt, const char *list, int stages, int *v, vt_err *e) {
    const char *p = list;
    int n = 0;
    char q[128]; /* the list for messages: whole, or its first 60 characters and its length */
    if (strlen(list) <= 60) snprintf(q, sizeof q, "'%s'", list);
    else snprintf(q, sizeof q, "'%.60s...' (%zu characters)", list, strlen(list));
    for (;;) {
        char *end = NULL;
        errno = 0;
        /* digits only: no blanks (strtol skips leading ones), no sign (single numbers take a "+", as strtol does) */
        const long x = *p >= '0' && *p <= '9' ? strtol(p, &end, 10) : 0;
        if (!end) end = (char *)p;
        if (errno || end == p || x < 1 || x > 65536 || (*end && *end != ','))
            return vt_seterr(e, "%s %s: expected comma-separated integers in [1, 65536]", opt, q);
        if (n < VT_MAX_STAGES) v[n] = (int)x;
        n++;
        if (!*end) break;
        p = end + 1;
    }
    if (n == 1)
        for (int i = 1; i < stages; i++) v[i] = v[0];
    else if (n != stages)
        return vt_seterr(e, "%s %s: %d values, but the model has %d stage(s): give one value for every stage or one "
                         "per stage", opt, q, n, stages);
    return 0;
}

int vt_parse_size(const char *s, int *h, int *w) {
    long v[2] = {0, 0};
    int n = 0;
    for (const char *p = s; n < 2; n++) {
        char *end = NULL;
        if (!isdigit((unsigned char)*p)) return -1;
        errno = 0;
        v[n] = strtol(p, &end, 10);
        if (errno || v[n] < 1 || v[n] > (1 << 24)) return -1;
        if (!*end) break;
        if (*end != 'x' || n == 1) return -1;
        p = end + 1;
    }
    *h = (int)v[0];
    *w = n == 1 && v[1] != v[0] ? (int)v[1] : 0;
    return 0;
}

int vt_model_parse_options(const char *text, int stages, vt_model_overrides *ov, char *store, size_t n, int once,
                           vt_err *e) {
    static const char *const flags[] = {"--train-form", "--double-heads", "--apply-transform", "--no-prepack"};
    static const char *const lists[] = {"--dims", "--depths", "--heads", "--windows"};
    static const char *const ints[] = {"--img-size", "--in-chans", "--num-classes"};
    static const char *const strs[] = {"--attn", "--ffn", "--dtype"};
    int *const flag_of[] = {&ov->train_form, &ov->double_heads, &ov->apply_transform, &ov->no_prepack};
    int *const list_of[] = {ov->dims, ov->depths, ov->heads, ov->windows};
    int *const int_of[] = {&ov->img_size, &ov->in_chans, &ov->num_classes};
    const char **const str_of[] = {&ov->attn, &ov->ffn, &ov->dtype};
    size_t used = 0;
    unsigned seen = 0; /* the options named so far (bit f, 4 + l, 8 + i, 11 + k), for `once` */
    for (const char *p = text ? text : "";;) {
        char opt[32], val[512];
        p += strspn(p, " \t\n");
        if (!*p) return 0;
        size_t len = strcspn(p, " \t\n=");
        if (len >= sizeof opt) return vt_seterr(e, "unknown model option '%.40s...'", p);
        memcpy(opt, p, len);
        opt[len] = '\0';
        p += len;
        const int eq = *p == '='; /* --name=value, as on the command line */
        p += eq;
        int f = 0, l = 0, i = 0, k = 0;
        for (f = 0; f < 4 && strcmp(opt, flags[f]) != 0; f++) {}
        for (l = 0; l < 4 && strcmp(opt, lists[l]) != 0; l++) {}
        for (i = 0; i < 3 && strcmp(opt, ints[i]) != 0; i++) {}
        for (k = 0; k < 3 && strcmp(opt, strs[k]) != 0; k++) {}
        if (f < 4 && eq) return vt_seterr(e, "model option %s takes no value", opt);
        const int bit = f < 4 ? f : l < 4 ? 4 + l : i < 3 ? 8 + i : k < 3 ? 11 + k : -1;
        if (once && bit >= 0 && (seen >> bit & 1)) return vt_seterr(e, "model option %s given twice", opt);
        if (bit >= 0) seen |= 1u << bit;
        if (f < 4) {
            *flag_of[f] = 1;
            continue;
        }
        if (l == 4 && i == 3 && k == 3)
            return vt_seterr(e, "unknown model option '%s' (model options: --attn --ffn --dims --depths --heads "
                             "--windows --img-size --in-chans --num-classes --dtype --train-form --double-heads "
                             "--apply-transform --no-prepack)", opt);
        /* the value: up to the next option (a blank, then "--"), as vitc records it (a list may hold blanks: "2, 2") */
        if (!eq) p += strspn(p, " \t\n");
        for (len = 0; p[len] && !(strchr(" \t\n", p[len]) && p[len + 1] == '-' && p[len + 2] == '-'); len++) {}
        while (len > 0 && strchr(" \t\n", p[len - 1])) len--;
        if (len == 0 || (len >= 2 && p[0] == '-' && p[1] == '-'))
            return vt_seterr(e, "model option %s needs a value", opt);
        if (len >= sizeof val) return vt_seterr(e, "model option %s: value too long", opt);
        memcpy(val, p, len);
        val[len] = '\0';
        p += len;
        if (l < 4) {
            vt_model_unblank_list(val);
            if (vt_model_parse_list(opt, val, stages, list_of[l], e)) return -1;
            if (list_of[l] == ov->windows) ov->windows_listed = strchr(val, ',') != NULL;
        } else if (i == 0) {
            if (vt_parse_size(val, &ov->img_size, &ov->img_w))
                return vt_seterr(e, "model option %s '%s': expected a size N or HxW (positive integers)", opt, val);
        } else if (i < 3) {
            char *end = NULL;
            errno = 0;
            const long x = strtol(val, &end, 10);
            if (end != val && *end && strchr(" \t\n", *end))
                return vt_seterr(e, "model option %s '%s': one integer, then the next option (--name)", opt, val);
            if (errno || *end || end == val || x < 1 || x > (1 << 24))
                return vt_seterr(e, "model option %s '%s': expected an integer in [1, %d]", opt, val, 1 << 24);
            *int_of[i] = (int)x;
        } else {
            if (used + len + 1 > n) return vt_seterr(e, "model options too long");
            memcpy(store + used, val, len + 1);
            *str_of[k] = store + used;
            used += len + 1;
        }
    }
}

/* Appends " opt v0,v1,..." (the stages' values) to buf at *len when v sets any stage; one value when every stage has
 * it and `one` is set. */
static void list_text(const char *opt, const int *v, int stages, int one, char *buf, size_t n, size_t *len) {
    if (v[0] <= 0 || *len >= n) return;
    *len += (size_t)snprintf(buf + *len, n - *len, " %s ", opt);
    for (int i = 0; i < (one ? 1 : stages) && *len < n; i++)
        *len += (size_t)snprintf(buf + *len, n - *len, "%s%d", i ? "," : "", v[i]);
}

/* Writes into buf (n bytes) the architecture options of ov (--img-size, --in-chans, --num-classes, --attn, --ffn,
 * --dims, --depths, --heads, --windows, --apply-transform, --double-heads), in the form vt_model_parse_options
 * reads. */
static void options_text(const vt_model_overrides *ov, int stages, char *buf, size_t n) {
    const struct { const char *opt; int v; } ints[] = {
        {"--img-size", ov->img_size}, {"--in-chans", ov->in_chans}, {"--num-classes", ov->num_classes}};
    size_t len = 0;
    if (n) buf[0] = '\0';
    for (size_t i = 0; i < sizeof ints / sizeof ints[0] && len < n; i++) {
        if (ints[i].v > 0) len += (size_t)snprintf(buf + len, n - len, " %s %d", ints[i].opt, ints[i].v);
        if (ints[i].v > 0 && i == 0 && ov->img_w > 0 && ov->img_w != ov->img_size && len < n)
            len += (size_t)snprintf(buf + len, n - len, "x%d", ov->img_w); /* --img-size HxW */
    }
    if (ov->attn && len < n) len += (size_t)snprintf(buf + len, n - len, " --attn %s", ov->attn);
    if (ov->ffn && len < n) len += (size_t)snprintf(buf + len, n - len, " --ffn %s", ov->ffn);
    list_text("--dims", ov->dims, stages, 0, buf, n, &len);
    list_text("--depths", ov->depths, stages, 0, buf, n, &len);
    list_text("--heads", ov->heads, stages, 0, buf, n, &len);
    list_text("--windows", ov->windows, stages, !ov->windows_listed, buf, n, &len);
    if (ov->apply_transform && len < n) len += (size_t)snprintf(buf + len, n - len, " --apply-transform");
    if (ov->double_heads && len < n) len += (size_t)snprintf(buf + len, n - len, " --double-heads");
    if (len >= n) { /* never for the values vt_model_configure accepts: nothing rather than a cut record */
        if (n) buf[0] = '\0';
        return;
    }
    if (len) memmove(buf, buf + 1, len); /* the text and its NUL, without the first blank */
}

/* Copies the type name [p, p + len) into dst (24 bytes); -1 with a message if it does not fit. */
static int set_name(char *dst, const char *p, size_t len, const char *model, const char *what, vt_err *e) {
    if (len == 0 || len >= 24)
        return vt_seterr(e, "%s: %s type '%.*s' is empty or too long", model, what, (int)len, p);
    memcpy(dst, p, len);
    dst[len] = '\0';
    return 0;
}

/* Sets the stages' attention types from "a" (every stage) or "a,b,c,d" (one per stage). */
static int set_attn(vt_model_cfg *c, const char *list, vt_err *e) {
    const int n = c->arch.nstages;
    if (!strchr(list, ',')) {
        for (int i = 0; i < n; i++)
            if (set_name(c->arch.stages[i].attn, list, strlen(list), c->name, "attention", e)) return -1;
        return 0;
    }
    const char *p = list;
    for (int i = 0; i < n; i++) {
        const char *end = strchr(p, ',');
        if (set_name(c->arch.stages[i].attn, p, end ? (size_t)(end - p) : strlen(p), c->name, "attention", e))
            return -1;
        if ((!end) != (i + 1 == n))
            return vt_seterr(e, "%s: --attn '%s' must name one type for all stages or one per stage "
                                  "(%d)", c->name, list, n);
        p = end ? end + 1 : p;
    }
    return 0;
}

/* vt_model_configure's work; every error it returns is the options' (the named configs are valid). */
static int configure(const vt_model_cfg *cfg, const vt_model_overrides *ov, vt_model_cfg *out, vt_err *e) {
    *out = *cfg;
    vt_arch_cfg *a = &out->arch;
    const unsigned caps = cfg->family->caps;
    if (ov->img_size > 0) a->img_size = ov->img_size;
    if (ov->img_size > 0) a->img_w = ov->img_w > 0 && ov->img_w != ov->img_size ? ov->img_w : 0;
    a->in_h = a->in_w = 0; /* the input at the size the weights are made for (vt_model_at_size sets another) */
    if (ov->in_chans > 0) a->in_chans = ov->in_chans;
    if (ov->num_classes > 0) a->num_classes = ov->num_classes;
    if (ov->attn && set_attn(out, ov->attn, e)) return -1;
    if (ov->attn && cfg->family->retyped) cfg->family->retyped(out, cfg); /* before --windows, which then decides */
    if (ov->ffn && set_name(a->ffn, ov->ffn, strlen(ov->ffn), cfg->name, "FFN", e)) return -1;
    int given = 0; /* values given: up to the last stage set */
    for (int i = 0; i < VT_MAX_STAGES; i++)
        if (ov->dims[i] > 0 || ov->depths[i] > 0 || ov->heads[i] > 0) given = i + 1;
    if (given > a->nstages)
        return vt_seterr(e, "%s: --dims/--depths/--heads give %d values but the model has %d "
                              "stage(s)", cfg->name, given, a->nstages);
    int fixed_heads = -1; /* the first stage whose type runs its own heads against a --heads: refused after the host
                           * check, which names a type the host cannot hold first */
    for (int i = 0; i < a->nstages; i++) {
        if (ov->dims[i] > 0) a->stages[i].dim = ov->dims[i];
        if (ov->depths[i] > 0) a->stages[i].depth = ov->depths[i];
        if (ov->heads[i] > 0) a->stages[i].heads = ov->heads[i];
        const vt_attn_type *t = vt_attn_find(a->stages[i].attn); /* a type with its own head count keeps it */
        if (t && t->heads > 0 && ov->heads[i] > 0 && ov->heads[i] != t->heads && !ov->recorded && fixed_heads < 0)
            fixed_heads = i;
        if (t && t->heads > 0) a->stages[i].heads = t->heads;
    }
    if (vt_model_depth(out) > VT_MAX_BLOCKS) /* the deepest named model has 40 */
        return vt_seterr(e, "%s: %d blocks in all (--depths) is more than vitc builds (%d)", cfg->name,
                         vt_model_depth(out), VT_MAX_BLOCKS);
    given = 0;
    for (int i = 0; i < VT_MAX_STAGES; i++)
        if (ov->windows[i] > 0) given = i + 1;
    if (given > a->nstages)
        return vt_seterr(e, "%s: --windows gives %d values but the model has %d stage(s)",
                              cfg->name, given, a->nstages);
    for (int i = 0; i < a->nstages; i++) /* --windows */
        if (ov->windows[i] > 0) {
            if (!(caps & VT_CAP_WINDOWS))
                return vt_seterr(e, "%s has no attention windows or stripes (--windows applies "
                                      "to Swin and CSwin models)", cfg->name);
            const int last = i == a->nstages - 1, res = a->patch > 0 ? a->img_size / (a->patch << i) : 0;
            if (last && (caps & VT_CAP_LAST_GLOBAL) && ov->windows_listed && ov->windows[i] != a->stages[i].window &&
                ov->windows[i] != res)
            {
                char alt[48] = "";
                if (a->stages[i].window != res) snprintf(alt, sizeof alt, " or %d", a->stages[i].window);
                return vt_seterr(e, "%s: stage %d attends globally whatever its stripe width (the "
                                      "official last stage), so its --windows entry %d can have no effect: give %d "
                                      "(its resolution at %d px%s)%s there, or one value for every stage", cfg->name,
                                      i + 1, ov->windows[i], res, a->img_size,
                                      ov->img_size > 0 ? "" : "; for inputs of another size, give that size as "
                                      "--img-size", alt);
            }
            a->stages[i].window = ov->windows[i];
        }
    if (ov->drop_path >= 0.0f || ov->drop_path != ov->drop_path) {
        if (!(ov->drop_path <= 0.99f)) /* (the command line's range; 1 would scale the kept branches by 1/0) */
            return vt_seterr(e, "%s: drop-path %g is not in [0, 0.99]", cfg->name, (double)ov->drop_path);
        if (ov->drop_path > 0.0f && !(caps & VT_CAP_DROP_PATH))
            return vt_seterr(e, "%s has no drop-path (the official %s code has none)", cfg->name,
                                  cfg->family->name);
        a->drop_path = ov->drop_path;
    }
    if (ov->cos_reg >= 0) {
        if (ov->cos_reg > 0 && !(caps & VT_CAP_COS_REG))
            return vt_seterr(e, "%s has no cos_reg term (the Refiner's official training alone adds one)", cfg->name);
        a->cos_reg = ov->cos_reg;
    }
    if (ov->apply_transform) {
        if (!(caps & VT_CAP_APPLY_TRANSFORM))
            return vt_seterr(e, "--apply-transform applies to Refined-ViT models, not %s", cfg->name);
        a->opts.refiner_apply_transform = 1;
    }
    if (ov->double_heads) {
        int hm = 0;
        for (int i = 0; i < a->nstages; i++) hm |= strcmp(a->stages[i].attn, "hmhsa") == 0;
        if (!hm)
            return vt_seterr(e, "--double-heads applies to hMHSA stages, and %s has none "
                                  "(--attn hmhsa)", cfg->name);
        a->opts.double_heads = 1;
    }
    if (ov->train_form) a->train_form = 1;
    if (ov->no_prepack) a->no_prepack = 1;
    if (ov->dtype && strcmp(ov->dtype, "fp32") != 0 && strcmp(ov->dtype, "int8") != 0 && strcmp(ov->dtype, "bf16") != 0)
        return vt_seterr(e, "unknown --dtype '%s' (fp32, bf16 or int8)", ov->dtype);
    if (ov->dtype) {
        a->int8 = strcmp(ov->dtype, "int8") == 0;
        a->bf16 = strcmp(ov->dtype, "bf16") == 0;
    }
    if (ov->crop_pct > 0.0f) out->pre.crop_pct = ov->crop_pct;
    if (!(out->pre.crop_pct > 0.0f)) out->pre.crop_pct = 0.875f; /* timm's DEFAULT_CROP_PCT */
    if (a->img_size < 1 || a->img_size > 4096)
        return vt_seterr(e, "%s: image size %d is outside [1, 4096]", cfg->name, a->img_size);
    if (a->img_w > 4096) /* img_w is 0 or positive (set above) */
        return vt_seterr(e, "%s: image width %d is outside [1, 4096]", cfg->name, a->img_w);
    if (a->img_w && !vt_model_any_size(out) && !(cfg->family->caps & VT_CAP_TUPLE_SIZE))
        return vt_seterr(e, "%s takes square inputs only: its weights depend on the image size (%s family), and are "
                         "made for one H = W (--img-size), not %dx%d", cfg->name, cfg->family->name, a->img_size,
                         a->img_w);
    double resized[2]; /* the eval transform's resize of each side */
    for (int side = 0; side < 2; side++) {
        const int px = side ? vt_arch_width(a) : a->img_size;
        const double resize = resized[side] = vt_crop_resize(px, out->pre.crop_pct);
        if (!(resize >= 1.0 && resize <= VT_IMAGE_MAX_SIDE))
            return vt_seterr(e, "%s: crop_pct %g resizes %d px images to %.4g px (1..%d): out of range", cfg->name,
                             (double)out->pre.crop_pct, px, resize, VT_IMAGE_MAX_SIDE);
    }
    if (!vt_image_target_ok((long long)resized[0], (long long)resized[1])) /* (an image of the input's shape) */
        return vt_seterr(e, "%s: crop_pct %g resizes %dx%d px images to %.0fx%.0f px, more than the %lld pixels an "
                         "image may have: out of range", cfg->name, (double)out->pre.crop_pct, a->img_size,
                         vt_arch_width(a), resized[0], resized[1], VT_IMAGE_MAX_PIXELS);
    if (a->in_chans > 64 || a->num_classes > 100000)
        return vt_seterr(e, "%s: %d input channels / %d classes out of range (at most 64 / 100000)", cfg->name,
                         a->in_chans, a->num_classes);
    if (vt_ffn_find(a->ffn) == NULL) {
        char names[256];
        return vt_seterr(e, "%s: unknown FFN type '%s' (%s)", cfg->name, a->ffn,
                              vt_block_type_names(1, names, sizeof names));
    }
    for (int i = 0; i < a->nstages; i++)
        if (vt_attn_find(a->stages[i].attn) == NULL) {
            char names[256];
            return vt_seterr(e, "%s: unknown attention type '%s' (%s)", cfg->name,
                                  a->stages[i].attn, vt_block_type_names(0, names, sizeof names));
        }
    if (ov->train_form && !vt_model_has_form(out))
        return vt_seterr(e, "%s has no re-parameterised blocks: --train-form applies to cFFN "
                              "(--ffn cffn) and Next-ViT models", out->name);
    if (cfg->family->check && cfg->family->check(out, e)) return -1;
    if (fixed_heads >= 0) {
        const vt_attn_type *t = vt_attn_find(a->stages[fixed_heads].attn);
        return vt_seterr(e, "%s: stage %d attention %s always runs %d heads, so --heads %d can have "
                              "no effect there", cfg->name, fixed_heads + 1, t->name, t->heads, ov->heads[fixed_heads]);
    }
    options_text(ov, a->nstages, out->options, sizeof out->options);
    return 0;
}

int vt_model_configure(const vt_model_cfg *cfg, const vt_model_overrides *ov, vt_model_cfg *out, vt_err *e) {
    const int fresh = e && !e->msg[0]; /* the code goes with this call's message (an earlier one keeps its own) */
    if (configure(cfg, ov, out, e) == 0) return 0;
    if (fresh) e->code = VT_E_USAGE; /* an option the model cannot take: the caller's to change (CLI exit status 2) */
    return -1;
}

int vt_model_any_size(const vt_model_cfg *c) {
    const vt_family *f = c->family;
    return (f->caps & VT_CAP_ANY_SIZE) || (f->any_size && f->any_size(c));
}

int vt_arch_width(const vt_arch_cfg *a) { return a->img_w > 0 ? a->img_w : a->img_size; }

int vt_model_resizes(const vt_model_cfg *c) { return c->family->resizes && c->family->resizes(c); }

void vt_arch_input(const vt_arch_cfg *a, int *h, int *w) {
    *h = a->in_h > 0 ? a->in_h : a->img_size;
    *w = a->in_h > 0 ? a->in_w : vt_arch_width(a);
}

const char *vt_arch_size_text(const vt_arch_cfg *a, char *buf, size_t n) {
    if (vt_arch_width(a) != a->img_size)
        snprintf(buf, n, "%dx%d", a->img_size, a->img_w);
    else
        snprintf(buf, n, "%d", a->img_size);
    return buf;
}

int vt_model_has_form(const vt_model_cfg *c) {
    const vt_ffn_type *f = vt_ffn_find(c->arch.ffn);
    return (c->family->caps & VT_CAP_FORM_RECORD) || (f && f->reparam);
}

int vt_model_window_run(const vt_model_cfg *c, int i) {
    return c->family->window_run ? c->family->window_run(c, i) : c->arch.stages[i].window;
}

int vt_model_stage_blocks(const vt_model_cfg *c, int i, char *buf, size_t n) {
    if (n) buf[0] = '\0';
    return c->family->stage_blocks ? c->family->stage_blocks(c, i, buf, n) : c->arch.stages[i].depth;
}

int vt_model_depth(const vt_model_cfg *c) {
    int n = 0;
    for (int i = 0; i < c->arch.nstages; i++) n += c->arch.stages[i].depth;
    return n;
}

float vt_model_drop_path(const vt_model_cfg *c, int i, int n) {
    return n > 1 ? c->arch.drop_path * (float)i / (float)(n - 1) : 0.0f;
}

vt_attn_ctx vt_stage_attn_ctx(const vt_model_cfg *c, int i, int grid_h, int grid_w, int lead) {
    const vt_arch_cfg *a = &c->arch;
    return (vt_attn_ctx){.heads = a->stages[i].heads, .qkv_bias = a->qkv_bias, .grid_h = grid_h, .grid_w = grid_w,
                         .lead = lead, .ln_eps = a->ln_eps, .winit = VT_INIT_W02, .opts = &a->opts};
}

int vt_four_stage_maps(vt_graph *g, vt_tensor *last, vt_tensor *maps[VT_MAX_STAGES]) {
    (void)last;
    return g->err.msg[0] || !maps[3] ? -1 : 4;
}

vt_ffn_ctx vt_stage_ffn_ctx(const vt_model_cfg *c, int i) {
    const vt_arch_cfg *a = &c->arch;
    return (vt_ffn_ctx){.hidden = (int)((float)a->stages[i].dim * a->stages[i].mlp_ratio),
                        .train_form = a->train_form, .winit = VT_INIT_W02, .opts = &a->opts};
}

/* A build's error names the model first (a block's message names only its block: "blocks.0.attn: ..."). */
static void name_model(vt_graph *g, const vt_model_cfg *c) {
    const size_t n = strlen(c->name);
    if (!g->err.msg[0] || (strncmp(g->err.msg, c->name, n) == 0 && g->err.msg[n] == ':')) return;
    char msg[sizeof g->err.msg];
    snprintf(msg, sizeof msg, "%s", g->err.msg);
    const int code = g->err.code; /* the kind survives the new message (out of memory stays so) */
    vt_clearerr(&g->err);
    vt_seterr_code(&g->err, code, "%s: %s", c->name, msg);
}

vt_tensor *vt_model_loss(vt_graph *g, vt_tensor *task_loss) {
    return g->aux_loss ? vt_add(g, task_loss, g->aux_loss) : task_loss;
}

vt_tensor *vt_model_build(vt_graph *g, const vt_model_cfg *c, int B, vt_tensor **input) {
    int s[4] = {B, c->arch.in_chans, 0, 0};
    vt_arch_input(&c->arch, &s[2], &s[3]);
    vt_tensor *x = vt_input(g, "input", 4, s);
    if (input) *input = x;
    g->int8 = c->arch.int8 && !g->training;
    g->gemm.prepack = !c->arch.no_prepack;
    if (c->arch.bf16 && vt_gemm_plan_bf16(&g->gemm, &g->err)) return NULL;
    vt_tensor *y = c->family->build(g, c, x);
    if (y && (y->ndim != 2 || y->shape[0] != B || y->shape[1] != c->arch.num_classes))
        return vt_fail(g, c->name, "network returned a tensor that is not (B, num_classes)");
    name_model(g, c);
    return y;
}

int vt_model_features(vt_graph *g, const vt_model_cfg *c, int B, vt_tensor **input, vt_tensor *maps[VT_MAX_STAGES]) {
    for (int i = 0; i < VT_MAX_STAGES; i++) maps[i] = NULL;
    if (!c->family->features) {
        vt_fail(g, c->name, "%s models have no stage feature maps", c->family->name);
        return -1;
    }
    int s[4] = {B, c->arch.in_chans, 0, 0};
    vt_arch_input(&c->arch, &s[2], &s[3]);
    vt_tensor *x = vt_input(g, "input", 4, s);
    if (input) *input = x;
    g->int8 = c->arch.int8 && !g->training;
    g->gemm.prepack = !c->arch.no_prepack;
    if (c->arch.bf16 && vt_gemm_plan_bf16(&g->gemm, &g->err)) return -1;
    const int n = c->family->features(g, c, x, maps);
    name_model(g, c);
    return g->err.msg[0] ? -1 : n;
}

int vt_no_decay_default(const vt_tensor *t, const char *const *skip) {
    if (t->ndim <= 1) return 1;
    for (int i = 0; skip && skip[i]; i++)
        if (strcmp(t->name, skip[i]) == 0) return 1;
    return 0;
}

int vt_model_create_params(const vt_model_cfg *c, vt_params *P, vt_err *e) {
    vt_graph *g = vt_graph_new(P, 0, e);
    if (!g) return -1;
    vt_tensor *y = vt_model_build(g, c, 1, NULL);
    int rc = 0;
    if (!y) rc = vt_seterr_from(e, &g->err, "%s", g->err.msg);
    vt_graph_free(g);
    if (rc) return rc;
    for (int i = 0; i < P->n; i++) {
        vt_tensor *t = P->t[i];
        if (t->kind == VT_PARAM) t->no_decay = c->family->no_decay ? c->family->no_decay(t) : vt_no_decay_default(t, NULL);
    }
    if (c->family->caps & VT_CAP_FORM_RECORD) P->form = c->arch.train_form ? "training" : "deployed";
    P->reparam = strcmp(c->arch.ffn, "cffn") == 0;
    vt_model_heads(c, P->heads, sizeof P->heads);
    P->model = c->name;
    snprintf(P->options, sizeof P->options, "%s", c->options);
    P->windows[0] = '\0';
    for (int i = 0, len = 0; (c->family->caps & VT_CAP_WINDOWS) && i < c->arch.nstages && len < 48; i++)
        len += snprintf(P->windows + len, sizeof P->windows - (size_t)len, "%s%d", i ? "," : "",
                        c->arch.stages[i].window);
    P->attn[0] = '\0';
    for (int i = 0, len = 0; i < c->arch.nstages && len < (int)sizeof P->attn; i++) {
        char one[32];
        vt_attn_record_name(c->arch.stages[i].attn, one, sizeof one);
        len += snprintf(P->attn + len, sizeof P->attn - (size_t)len, "%s%s", i ? "," : "", one);
    }
    return 0;
}

void vt_model_heads(const vt_model_cfg *c, char *buf, size_t n) {
    size_t len = 0;
    buf[0] = '\0';
    for (int i = 0; i < c->arch.nstages && len < n; i++) { /* as run: after --double-heads */
        const vt_stage_cfg *s = &c->arch.stages[i];
        const int h = s->heads * (c->arch.opts.double_heads && strcmp(s->attn, "hmhsa") == 0 ? 2 : 1);
        len += (size_t)snprintf(buf + len, n - len, "%s%d", i ? "," : "", h);
    }
}

int vt_model_init_params(const vt_model_cfg *c, vt_params *P, uint64_t seed, vt_err *e) {
    if (vt_model_create_params(c, P, e)) return -1;
    vt_params_init(P, seed);
    return 0;
}

vt_model_cfg vt_model_training_form(const vt_model_cfg *c) {
    vt_model_cfg t = *c;
    t.arch.train_form = 1;
    return t;
}

int vt_family_cffn_deploy(const vt_model_cfg *c, const vt_params *train, vt_params *dep, vt_err *e) {
    if (strcmp(c->arch.ffn, "cffn") != 0)
        return vt_seterr(e, "%s: nothing to deploy (without cFFN, --ffn cffn, its training and deployed forms are the "
                         "same)", c->name);
    return vt_cffn_deploy(train, dep, -1.0f, e); /* the cFFN's own BatchNorm eps */
}

int vt_model_deploy(const vt_model_cfg *c, const vt_params *train, vt_params *dep, vt_err *e) {
    if (!c->family->deploy)
        return vt_seterr(e, "%s: nothing to deploy (%s models have the same form in training and inference)", c->name,
                         c->family->name);
    vt_model_cfg d = *c;
    d.arch.train_form = 0;
    if (vt_model_create_params(&d, dep, e) || c->family->deploy(&d, train, dep, e)) return -1;
    vt_params_changed(dep); /* graphs already built on dep renew their weight copies and constant nodes */
    int64_t k = 0; /* a merge past float's range (extreme BatchNorm statistics): no such file */
    const vt_tensor *t = vt_params_first_nonfinite(dep, &k);
    if (t)
        return vt_seterr(e, "%s: the merge makes '%s' %s at element %lld (the training-form values it folds "
                         "overflow float32): weights of that form could not be loaded", c->name, t->name,
                         isnan(t->data[k]) ? "NaN" : "infinite", (long long)k);
    return 0;
}

int vt_model_summarize(const vt_model_cfg *c, vt_model_summary *s, vt_err *e) {
    memset(s, 0, sizeof *s);
    vt_params *P = vt_params_new(e);
    if (!P) return -1;
    P->shapes_only = 1;
    vt_graph *g = vt_graph_new(P, 0, e);
    int rc = -1;
    if (g) g->all_tokens = 1; /* the model's MACs, not the pruned last block's */
    if (g && !vt_model_build(g, c, 1, NULL)) { /* the configuration cannot be built: the caller's options */
        vt_seterr_code(e, g->err.code == VT_E_NOMEM ? VT_E_NOMEM : VT_E_USAGE, "%s", g->err.msg);
    } else if (g) {
        s->params = vt_params_count(P, VT_PARAM);
        s->buffers = vt_params_count(P, VT_BUFFER);
        s->paper_params = vt_params_count_paper(P);
        s->macs = vt_graph_macs(g);
        s->scope = calloc((size_t)g->nscopes, sizeof *s->scope);
        s->scope_params = calloc((size_t)g->nscopes, sizeof *s->scope_params);
        s->scope_macs = calloc((size_t)g->nscopes, sizeof *s->scope_macs);
        if (!s->scope || !s->scope_params || !s->scope_macs) {
            vt_seterr_code(e, VT_E_NOMEM, "out of memory");
        } else {
            s->nscopes = g->nscopes;
            for (int i = 0; i < g->nscopes; i++) snprintf(s->scope[i], VT_NAMELEN, "%s", g->scopes[i]);
            for (int k = 0; k < P->n; k++)
                if (P->t[k]->kind == VT_PARAM) s->scope_params[P->t[k]->scope] += P->t[k]->numel;
            for (int k = 0; k < g->nn; k++) s->scope_macs[g->nodes[k]->scope] += g->nodes[k]->macs;
            rc = 0;
        }
    }
    vt_graph_free(g);
    vt_params_free(P);
    if (rc) vt_model_summary_free(s);
    return rc;
}

void vt_model_summary_free(vt_model_summary *s) {
    free(s->scope);
    free(s->scope_params);
    free(s->scope_macs);
    memset(s, 0, sizeof *s);
}
