/* Image folders (torchvision ImageFolder semantics, see include/vitc/imagefolder.h) and their sample source. */
#include "vitc/imagefolder.h"

#include <cJSON.h>
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "vitc/fileio.h"
#include "vitc/image.h"
#include "vitc/safetensors.h"

/* torchvision's IMG_EXTENSIONS less .tif, .tiff and .webp, which vitc's decoders do not read. */
static const char *const exts[] = {".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm"};
#define EXT_LIST ".jpg .jpeg .png .ppm .bmp .pgm"
#define MAX_DEPTH 32 /* folders nested deeper are refused */

static const char *const unread_exts[] = {".tif", ".tiff", ".webp"};

/* 1 when name ends with one of the n extensions ext (case-insensitive). */
static int has_ext(const char *name, const char *const *ext, size_t n_ext) {
    const size_t n = strlen(name);
    for (size_t k = 0; k < n_ext; k++) {
        const size_t m = strlen(ext[k]);
        if (n < m) continue;
        size_t j = 0;
        while (j < m && tolower((unsigned char)name[n - m + j]) == ext[k][j]) j++;
        if (j == m) return 1;
    }
    return 0;
}

/* 1 when name ends with an image extension vitc reads. */
static int is_image_file(const char *name) { return has_ext(name, exts, sizeof exts / sizeof *exts); }

/* A growable list of strings. */
typedef struct {
    char **s;
    int n, cap;
} strlist;

static int push(strlist *l, char *s, vt_err *e) {
    if (!s) return vt_seterr_code(e, VT_E_NOMEM, "out of memory scanning an image folder");
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 64;
        char **p = realloc(l->s, sizeof(char *) * (size_t)cap);
        if (!p) {
            free(s);
            return vt_seterr_code(e, VT_E_NOMEM, "out of memory scanning an image folder");
        }
        l->s = p;
        l->cap = cap;
    }
    l->s[l->n++] = s;
    return 0;
}

static void strlist_free(strlist *l) {
    for (int i = 0; i < l->n; i++) free(l->s[i]);
    free(l->s);
    *l = (strlist){NULL, 0, 0};
}

static char *join(const char *a, const char *b) {
    const size_t n = strlen(a) + strlen(b) + 2;
    char *p = malloc(n);
    if (p) snprintf(p, n, "%s/%s", a, b);
    return p;
}

/* Python's order of two file names (sorted() on str, what torchvision's ImageFolder and os.walk's caller sort by): code
 * points, a byte outside a valid UTF-8 sequence read as U+DC00 + the byte (os.fsdecode's surrogateescape). Byte order
 * where both are UTF-8; otherwise such a byte sorts between U+D7FF and U+E000, not past every character as strcmp's
 * byte order put it. */
static int name_cmp(const char *a, const char *b) {
    const uint8_t *x = (const uint8_t *)a, *y = (const uint8_t *)b;
    const size_t nx = strlen(a), ny = strlen(b);
    size_t i = 0, j = 0;
    for (;;) {
        if (i == nx || j == ny) return (j == ny) - (i == nx);
        if (x[i] == y[j] && x[i] < 0x80) { /* ASCII: the common case */
            i++, j++;
            continue;
        }
        uint32_t p, q;
        const size_t kp = vt_utf8_next(x + i, nx - i, &p), kq = vt_utf8_next(y + j, ny - j, &q);
        if (!kp) p = 0xdc00u + x[i];
        if (!kq) q = 0xdc00u + y[j];
        if (p != q) return (p > q) - (p < q);
        i += kp ? kp : 1, j += kq ? kq : 1;
    }
}

static int cmp_str(const void *a, const void *b) { return name_cmp(*(char *const *)a, *(char *const *)b); }

/* The error of a folder that cannot be opened (errno): the reason first, as a path past PATH_MAX would push it out
 * of the message. */
static int cannot_open(const char *dir, vt_err *e) {
    return vt_seterr_code(e, VT_E_IO, "cannot open a folder of an image folder (%s, a path of %zu bytes): %s",
                          strerror(errno), strlen(dir), dir);
}

static int is_dir(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* name with control bytes written as \n, \t, \r or \xNN (a C1 control, UTF-8 C2 80-9F, as \xc2\xNN), cut to fit
 * out[n]. */
static const char *printable(const char *name, char *out, size_t n) {
    size_t o = 0;
    for (const unsigned char *p = (const unsigned char *)name; *p && o + 8 < n; p++) {
        if (*p == '\n' || *p == '\t' || *p == '\r')
            o += (size_t)snprintf(out + o, n - o, "\\%c", *p == '\n' ? 'n' : *p == '\t' ? 't' : 'r');
        else if (*p < 0x20 || *p == 0x7f)
            o += (size_t)snprintf(out + o, n - o, "\\x%02x", *p);
        else if (vt_c1_at(p))
            o += (size_t)snprintf(out + o, n - o, "\\xc2\\x%02x", *++p);
        else
            out[o++] = (char)*p;
    }
    out[o] = '\0';
    return out;
}

/* The names in dir: its subfolders (dirs) and its files with an image extension (files), sorted; *unread (when not
 * NULL) counts its files of torchvision's extensions that vitc does not read. strict: an entry that cannot be looked up
 * (a dangling symlink, a symlink loop) is an error, where torchvision's is_dir() would drop it without a word: in a
 * split folder it is likely a class, whose images would be left out. */
static int list_dir(const char *dir, strlist *dirs, strlist *files, int *unread, int strict, vt_err *e) {
    DIR *d = opendir(dir);
    if (!d) return cannot_open(dir, e);
    struct dirent *de;
    int rc = 0;
    while (rc == 0 && (errno = 0, de = readdir(d))) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0) continue;
        char *full = join(dir, de->d_name);
        if (!full) {
            rc = vt_seterr_code(e, VT_E_NOMEM, "out of memory scanning an image folder");
            break;
        }
        struct stat st; /* looked up by its name in the open folder: a path past PATH_MAX still says what it is, and
                         * the scan then fails where it opens that folder, saying why */
        const int found = fstatat(dirfd(d), de->d_name, &st, 0) == 0;
        if (!found && strict) {
            char shown[160];
            rc = vt_seterr_code(e, VT_E_IO, "image folder: cannot follow %s in %s (%s): a class folder's link that "
                                "points nowhere would leave the class out; fix or remove it",
                                printable(de->d_name, shown, sizeof shown), dir, strerror(errno));
        } else if (found && S_ISDIR(st.st_mode)) {
            if (dirs) rc = push(dirs, strdup(de->d_name), e);
        } else if (files && is_image_file(de->d_name)) {
            rc = push(files, strdup(de->d_name), e);
        } else if (unread && has_ext(de->d_name, unread_exts, sizeof unread_exts / sizeof *unread_exts)) {
            ++*unread;
        }
        free(full);
    }
    if (rc == 0 && errno) /* readdir's NULL on an error, not the end: part of the folder would be left out silently */
        rc = vt_seterr_code(e, VT_E_IO, "cannot read the folder %s: %s", dir, strerror(errno));
    closedir(d);
    if (dirs && dirs->n > 1) qsort(dirs->s, (size_t)dirs->n, sizeof(char *), cmp_str);
    if (files && files->n > 1) qsort(files->s, (size_t)files->n, sizeof(char *), cmp_str);
    return rc;
}

/* A file found under a class folder: os.walk's root and the file name, ordered as sorted(os.walk()) then sorted(files). */
typedef struct {
    char *root, *name;
} found;

static int cmp_found(const void *a, const void *b) {
    const found *x = a, *y = b;
    const int c = name_cmp(x->root, y->root);
    return c ? c : name_cmp(x->name, y->name);
}

/* The folders a split's scan has reached, by (st_dev, st_ino), with the path each was first reached by: symlinked
 * folders are followed, so a folder reached twice (a symlink loop, or links that branch to one folder: 2^depth
 * visits) is an error. An open-addressing hash set. */
typedef struct {
    dev_t dev;
    ino_t ino;
    char *path; /* NULL: a free slot */
} seen_dir;

typedef struct {
    seen_dir *t;
    size_t n, cap; /* cap: a power of two, or 0 */
} seen_set;

static size_t seen_slot(const seen_set *s, dev_t dev, ino_t ino) {
    uint64_t h = ((uint64_t)dev * 0x9e3779b97f4a7c15u) ^ ((uint64_t)ino * 0xff51afd7ed558ccdu);
    h ^= h >> 29;
    size_t i = (size_t)h & (s->cap - 1);
    while (s->t[i].path && (s->t[i].dev != dev || s->t[i].ino != ino)) i = (i + 1) & (s->cap - 1);
    return i;
}

static void seen_free(seen_set *s) {
    for (size_t i = 0; i < s->cap; i++) free(s->t[i].path);
    free(s->t);
    *s = (seen_set){NULL, 0, 0};
}

/* Adds folder dir to s: an error naming both paths when it was reached before. */
static int seen_add(seen_set *s, const char *dir, vt_err *e) {
    struct stat st;
    if (stat(dir, &st) != 0) return cannot_open(dir, e);
    if (2 * (s->n + 1) > s->cap) { /* grow to keep the load under 1/2 */
        seen_set g = {calloc(s->cap ? 2 * s->cap : 64, sizeof(seen_dir)), 0, s->cap ? 2 * s->cap : 64};
        if (!g.t) return vt_seterr_code(e, VT_E_NOMEM, "out of memory scanning an image folder");
        for (size_t i = 0; i < s->cap; i++)
            if (s->t[i].path) g.t[seen_slot(&g, s->t[i].dev, s->t[i].ino)] = s->t[i];
        g.n = s->n;
        free(s->t);
        *s = g;
    }
    const size_t i = seen_slot(s, st.st_dev, st.st_ino);
    if (s->t[i].path)
        return vt_seterr(e, "image folder: %s is the folder %s reached again (a symlink loop, or two links to one "
                         "folder); each folder may be reached once", dir, s->t[i].path);
    if (!(s->t[i].path = strdup(dir))) return vt_seterr_code(e, VT_E_NOMEM, "out of memory scanning an image folder");
    s->t[i].dev = st.st_dev;
    s->t[i].ino = st.st_ino;
    s->n++;
    return 0;
}

/* Appends the image paths under dir (recursively) to out; seen: the folders reached so far; unread: as list_dir's. */
static int walk(const char *dir, int depth, seen_set *seen, found **out, int *n, int *cap, int *unread, vt_err *e) {
    if (depth > MAX_DEPTH) return vt_seterr(e, "folder %s is nested more than %d levels deep", dir, MAX_DEPTH);
    if (seen_add(seen, dir, e)) return -1;
    strlist dirs = {0}, files = {0};
    int rc = list_dir(dir, &dirs, &files, unread, 0, e);
    for (int i = 0; rc == 0 && i < files.n; i++) {
        if (*n == *cap) {
            int c = *cap ? 2 * *cap : 256;
            found *p = realloc(*out, sizeof(found) * (size_t)c);
            if (!p) {
                rc = vt_seterr_code(e, VT_E_NOMEM, "out of memory scanning an image folder");
                break;
            }
            *out = p;
            *cap = c;
        }
        char *root = strdup(dir);
        if (!root) {
            rc = vt_seterr_code(e, VT_E_NOMEM, "out of memory scanning an image folder");
            break;
        }
        (*out)[(*n)++] = (found){root, files.s[i]};
        files.s[i] = NULL;
    }
    for (int i = 0; rc == 0 && i < dirs.n; i++) {
        char *sub = join(dir, dirs.s[i]);
        rc = sub ? walk(sub, depth + 1, seen, out, n, cap, unread, e)
                 : vt_seterr_code(e, VT_E_NOMEM, "out of memory scanning an image folder");
        free(sub);
    }
    strlist_free(&dirs);
    strlist_free(&files);
    return rc;
}

/* Checks a class name: not empty, valid UTF-8 (classes.json and JSON output carry it), no control characters (bytes
 * below 0x20, 0x7f, and U+0080-U+009F, UTF-8 C2 80-9F, whose CSI a terminal reads as the start of an escape: they
 * would break the lines that print it). where begins the error message. */
static int check_class_name(const char *name, const char *where, vt_err *e) {
    if (!name[0]) return vt_seterr(e, "%s: an empty class name", where);
    size_t bad = 0;
    if (!vt_utf8_valid((const uint8_t *)name, strlen(name), &bad)) {
        char shown[160];
        return vt_seterr(e, "%s: class name '%s' is not valid UTF-8 (byte 0x%02x at offset %zu); rename it", where,
                         printable(name, shown, sizeof shown), (unsigned char)name[bad], bad);
    }
    for (const unsigned char *p = (const unsigned char *)name; *p; p++)
        if (*p < 0x20 || *p == 0x7f || vt_c1_at(p)) {
            char shown[160];
            if (*p == 0xc2)
                return vt_seterr(e, "%s: class name '%s' has a control character (U+%04X)", where,
                                 printable(name, shown, sizeof shown), p[1]);
            return vt_seterr(e, "%s: class name '%s' has a control character (byte 0x%02x)", where,
                             printable(name, shown, sizeof shown), *p);
        }
    return 0;
}

void vt_imagefolder_free(vt_imagefolder *f) {
    for (int i = 0; i < f->nclasses && f->classes; i++) free(f->classes[i]);
    for (int i = 0; i < f->n && f->paths; i++) free(f->paths[i]);
    free(f->classes);
    free(f->paths);
    free(f->labels);
    memset(f, 0, sizeof *f);
}

int vt_imagefolder_scan(const char *split_dir, const vt_imagefolder *classes, vt_imagefolder *out, vt_err *e) {
    memset(out, 0, sizeof *out);
    if (!is_dir(split_dir)) return vt_seterr(e, "image folder: %s is not a folder", split_dir);
    strlist cls = {0};
    found *fs = NULL;
    int nf = 0, cap = 0, unread = 0;
    seen_set seen = {NULL, 0, 0}; /* the split folder and every folder under it, reached once each */
    int rc = seen_add(&seen, split_dir, e);
    if (rc == 0) rc = list_dir(split_dir, &cls, NULL, NULL, 1, e);
    if (rc == 0 && cls.n == 0)
        rc = vt_seterr(e, "image folder: %s has no class folders (expected %s/<class>/<image>)", split_dir, split_dir);
    if (rc == 0) { /* every class folder's name, the val split's too (it must be a train class) */
        char *where = malloc(strlen(split_dir) + 64);
        if (where) snprintf(where, strlen(split_dir) + 64, "image folder: a class folder in %s", split_dir);
        for (int c = 0; rc == 0 && c < cls.n; c++)
            rc = where ? check_class_name(cls.s[c], where, e) : vt_seterr_code(e, VT_E_NOMEM, "out of memory");
        free(where);
    }
    int *label_of = rc == 0 ? calloc((size_t)cls.n, sizeof(int)) : NULL;
    if (rc == 0 && !label_of) rc = vt_seterr_code(e, VT_E_NOMEM, "out of memory");
    for (int c = 0; rc == 0 && c < cls.n; c++) {
        label_of[c] = c;
        if (classes) {
            label_of[c] = -1;
            for (int k = 0; k < classes->nclasses; k++)
                if (strcmp(classes->classes[k], cls.s[c]) == 0) label_of[c] = k;
            if (label_of[c] < 0) {
                rc = vt_seterr(e, "image folder: class folder %s/%s has no counterpart in the training classes "
                               "(the %d of the train folder or of --classes)", split_dir, cls.s[c],
                               classes->nclasses);
                break;
            }
        }
        char *cdir = join(split_dir, cls.s[c]);
        const int before = nf;
        rc = cdir ? walk(cdir, 0, &seen, &fs, &nf, &cap, &unread, e)
                  : vt_seterr_code(e, VT_E_NOMEM, "out of memory");
        if (rc == 0 && nf == before)
            rc = vt_seterr(e, "image folder: class folder %s holds no image files (" EXT_LIST ")", cdir);
        if (rc == 0 && nf - before > 1) qsort(fs + before, (size_t)(nf - before), sizeof *fs, cmp_found);
        free(cdir);
        for (int i = before; rc == 0 && i < nf; i++) { /* root becomes the full path */
            char *p = join(fs[i].root, fs[i].name);
            if (!p) {
                rc = vt_seterr_code(e, VT_E_NOMEM, "out of memory");
                break;
            }
            free(fs[i].root);
            free(fs[i].name);
            fs[i].root = p;
            fs[i].name = NULL;
        }
        if (rc == 0) {
            int *l = realloc(out->labels, sizeof(int) * (size_t)(nf > 0 ? nf : 1));
            if (!l) rc = vt_seterr_code(e, VT_E_NOMEM, "out of memory");
            else out->labels = l;
            for (int i = before; rc == 0 && i < nf; i++) out->labels[i] = label_of[c];
        }
    }
    if (rc == 0) {
        out->n = nf;
        out->unread = unread;
        out->paths = calloc((size_t)(nf > 0 ? nf : 1), sizeof(char *)); /* zeroed: freed whole if a later step fails */
        const int K = classes ? classes->nclasses : cls.n;
        out->classes = calloc((size_t)K, sizeof(char *));
        if (!out->paths || !out->classes) rc = vt_seterr_code(e, VT_E_NOMEM, "out of memory");
        for (int i = 0; rc == 0 && i < nf; i++) {
            out->paths[i] = fs[i].root;
            fs[i].root = NULL;
        }
        out->nclasses = K;
        for (int k = 0; rc == 0 && k < K; k++)
            if (!(out->classes[k] = strdup(classes ? classes->classes[k] : cls.s[k])))
                rc = vt_seterr_code(e, VT_E_NOMEM, "out of memory");
    }
    for (int i = 0; i < nf; i++) {
        free(fs[i].root);
        free(fs[i].name);
    }
    free(fs);
    free(label_of);
    strlist_free(&cls);
    seen_free(&seen);
    if (rc) {
        if (!out->paths) out->n = 0;
        vt_imagefolder_free(out);
    }
    return rc;
}

int vt_imagefolder_open(const char *dir, vt_imagefolder *train, vt_imagefolder *val, vt_err *e) {
    memset(train, 0, sizeof *train);
    memset(val, 0, sizeof *val);
    if (!is_dir(dir)) return vt_seterr(e, "image folder %s does not exist or is not a folder", dir);
    char *t = join(dir, "train"), *v = join(dir, "val");
    int rc = 0;
    if (!t || !v)
        rc = vt_seterr_code(e, VT_E_NOMEM, "out of memory");
    else if (!is_dir(t))
        rc = vt_seterr(e, "image folder %s has no train/ folder (expected %s/train/<class>/<image> and %s/val/...; "
                       "to evaluate a val/ folder alone, give the classes in training order with --classes "
                       "CLASSES.json, e.g. the run folder's classes.json)", dir, dir, dir);
    else if (!is_dir(v))
        rc = vt_seterr(e, "image folder %s has no val/ folder (expected %s/val/<class>/<image>)", dir, dir);
    else if (vt_imagefolder_scan(t, NULL, train, e) || vt_imagefolder_scan(v, train, val, e))
        rc = -1;
    free(t);
    free(v);
    if (rc) {
        vt_imagefolder_free(train);
        vt_imagefolder_free(val);
    }
    return rc;
}

int vt_imagefolder_write_classes(const vt_imagefolder *f, const char *path, vt_err *e) {
    cJSON *o = cJSON_CreateObject();
    int rc = o ? 0 : vt_seterr_code(e, VT_E_NOMEM, "out of memory");
    for (int k = 0; rc == 0 && k < f->nclasses; k++) {
        char key[16];
        snprintf(key, sizeof key, "%d", k);
        if (!cJSON_AddStringToObject(o, key, f->classes[k])) rc = vt_seterr_code(e, VT_E_NOMEM, "out of memory");
    }
    char *text = rc == 0 ? cJSON_Print(o) : NULL;
    if (rc == 0 && !text) rc = vt_seterr_code(e, VT_E_NOMEM, "out of memory");
    if (rc == 0) {
        size_t n = strlen(text);
        char *withnl = malloc(n + 2);
        if (!withnl) {
            rc = vt_seterr_code(e, VT_E_NOMEM, "out of memory");
        } else {
            memcpy(withnl, text, n);
            memcpy(withnl + n, "\n", 2);
            rc = vt_write_text(path, withnl, e);
            free(withnl);
        }
    }
    free(text);
    cJSON_Delete(o);
    return rc;
}

void vt_classes_free(char **names, int n) {
    for (int i = 0; names && i < n; i++) free(names[i]);
    free(names);
}

int vt_classes_sidecar(const char *weights, char *path, size_t n) {
    const size_t L = strlen(weights), S = strlen(".safetensors");
    const size_t stem = L > S && strcmp(weights + L - S, ".safetensors") == 0 ? L - S : L;
    const int len = snprintf(path, n, "%.*s.classes.json", (int)stem, weights);
    return len < 0 || (size_t)len >= n ? -1 : 0;
}

/* 1 when path names something, 0 when nothing is there, -1 (the reason in e) when it cannot be told, e.g. a symlink
 * loop or a folder without search permission: such a file is not silently passed over. */
static int present(const char *path, vt_err *e) {
    struct stat st;
    if (stat(path, &st) == 0) return 1;
    if (errno == ENOENT || errno == ENOTDIR) return 0;
    return vt_seterr_code(e, VT_E_IO, "%s: %s", path, strerror(errno));
}

int vt_classes_beside_path(const char *weights, char *path, size_t n, vt_err *e) {
    const int side = vt_classes_sidecar(weights, path, n) != 0 ? 0 : present(path, e);
    if (side != 0) return side;
    const char *slash = strrchr(weights, '/'); /* then the folder's */
    const int len = snprintf(path, n, "%.*s%sclasses.json", slash ? (int)(slash - weights) : 0, weights,
                             slash ? "/" : "");
    return len < 0 || (size_t)len >= n ? 0 : present(path, e);
}

int vt_classes_beside(const char *weights, int K, char ***names, char *path, size_t n, vt_err *e) {
    *names = NULL;
    const int found = vt_classes_beside_path(weights, path, n, e);
    if (found <= 0) return found;
    int got = 0;
    if (vt_classes_read(path, names, &got, e)) return -1;
    if (got != K) {
        vt_classes_free(*names, got);
        *names = NULL;
        return vt_seterr(e, "%s names %d classes but the model has %d outputs", path, got, K);
    }
    return 1;
}

static int cmp_cstr(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

/* 1 when key is a class index as written by vt_imagefolder_write_classes: "0" or digits without a leading zero. */
static int index_key(const char *key) {
    if (!key || !key[0] || (key[0] == '0' && key[1])) return 0;
    for (const char *p = key; *p; p++)
        if (*p < '0' || *p > '9') return 0;
    return 1;
}

int vt_classes_read(const char *path, char ***names, int *n, vt_err *e) {
    unsigned char *buf = NULL;
    size_t len = 0;
    if (vt_read_file(path, (size_t)64 << 20, &buf, &len, e)) return -1;
    const unsigned char *nul = memchr(buf, 0, len);
    const long esc = nul ? -1 : vt_json_escaped_nul(buf, len); /* \u0000: cJSON's strings would end there */
    if (esc >= 0) nul = buf + esc;
    const size_t nul_at = nul ? (size_t)(nul - buf) : 0;
    const char *end = NULL;
    cJSON *o = nul ? NULL : cJSON_ParseWithLengthOpts((const char *)buf, len, &end, 0);
    /* where parsing stopped: the object's end, or the error (cJSON sets end on failure too) */
    const size_t stop = end ? (size_t)(end - (const char *)buf) : 0;
    size_t at = o && end ? stop : len; /* only whitespace may follow the object */
    while (at < len && (buf[at] == ' ' || buf[at] == '\t' || buf[at] == '\n' || buf[at] == '\r')) at++;
    free(buf);
    if (nul || !cJSON_IsObject(o) || at < len) {
        cJSON_Delete(o);
        if (nul) return vt_seterr(e, "%s: a NUL character at offset %zu", path, nul_at);
        if (o && at < len) return vt_seterr(e, "%s: text after the JSON object (at byte %zu)", path, at);
        if (!o && end) return vt_seterr(e, "%s: not valid JSON (parse error near byte %zu)", path, stop);
        return vt_seterr(e, "%s: not a class index map (a JSON object {\"0\": \"name\", ...})", path);
    }
    const int K = cJSON_GetArraySize(o);
    char **nm = calloc((size_t)(K > 0 ? K : 1), sizeof(char *));
    const char **keys = calloc((size_t)(K > 0 ? K : 1), sizeof(char *));
    const cJSON **vals = calloc((size_t)(K > 0 ? K : 1), sizeof(cJSON *)); /* by class index: one pass, not K */
    int rc = K > 0 && nm && keys && vals
                 ? 0
                 : vt_seterr_code(e, K > 0 ? VT_E_NOMEM : VT_E_FAILED, "%s: %s", path,
                                  K > 0 ? "out of memory" : "no classes");
    int i = 0;
    for (const cJSON *c = o->child; rc == 0 && c; c = c->next, i++) {
        keys[i] = c->string;
        if (!index_key(c->string))
            rc = vt_seterr(e, "%s: key \"%.40s\" is not a class index (0, 1, ... without leading zeros)", path,
                           c->string ? c->string : "");
        else if (strlen(c->string) <= 9 && atoi(c->string) < K)
            vals[atoi(c->string)] = c; /* keys past K leave an index below it missing */
    }
    if (rc == 0) { /* a key given twice: cJSON keeps both, and one index would go missing */
        qsort(keys, (size_t)K, sizeof *keys, cmp_cstr);
        for (int k = 1; rc == 0 && k < K; k++)
            if (strcmp(keys[k - 1], keys[k]) == 0) rc = vt_seterr(e, "%s: duplicate key \"%s\"", path, keys[k]);
    }
    for (int k = 0; rc == 0 && k < K; k++) {
        char where[32];
        vt_err ne = {0};
        snprintf(where, sizeof where, "class %d", k);
        const cJSON *v = vals[k];
        if (!cJSON_IsString(v))
            rc = vt_seterr(e, "%s: class %d is missing or not a string (keys must be 0..%d)", path, k, K - 1);
        else if (check_class_name(v->valuestring, where, &ne))
            rc = vt_seterr(e, "%s: %s", path, ne.msg);
        else if (!(nm[k] = strdup(v->valuestring)))
            rc = vt_seterr_code(e, VT_E_NOMEM, "out of memory");
    }
    if (rc == 0) { /* a name given twice: sorted, equal names are neighbours */
        memcpy(keys, nm, sizeof(char *) * (size_t)K);
        qsort(keys, (size_t)K, sizeof *keys, cmp_cstr);
        for (int k = 1; rc == 0 && k < K; k++)
            if (strcmp(keys[k - 1], keys[k]) == 0) {
                int first = -1, second = -1;
                for (int j = 0; j < K; j++)
                    if (strcmp(nm[j], keys[k]) == 0) {
                        if (first < 0) first = j;
                        else if (second < 0) second = j;
                    }
                rc = vt_seterr(e, "%s: classes %d and %d are both named '%.200s'", path, first, second, keys[k]);
            }
    }
    cJSON_Delete(o);
    free(vals);
    free(keys);
    if (rc) {
        vt_classes_free(nm, K);
        return -1;
    }
    *names = nm;
    *n = K;
    return 0;
}

static int folder_get(void *ctx, int i, int chans, int min_side, vt_image *img, int *label, vt_err *e) {
    const vt_imagefolder *f = ctx;
    if (i < 0 || i >= f->n) return vt_seterr(e, "sample %d out of range [0, %d)", i, f->n);
    unsigned char *buf = NULL;
    size_t n = 0;
    vt_err de = {0};
    if (vt_image_read(f->paths[i], &buf, &n, &de) ||
        vt_image_decode(buf, n, chans, min_side, img, &de)) {
        free(buf);
        return strstr(de.msg, f->paths[i]) ? vt_seterr_from(e, &de, "%s", de.msg) /* it names the file already */
                                           : vt_seterr_from(e, &de, "%s: %s", f->paths[i], de.msg);
    }
    free(buf);
    *label = f->labels[i];
    return 0;
}

static const char *folder_name(void *ctx, int i) {
    const vt_imagefolder *f = ctx;
    return i >= 0 && i < f->n ? f->paths[i] : NULL;
}

vt_source vt_source_imagefolder(const vt_imagefolder *f) {
    vt_source s = {f->n, f->nclasses, folder_get, folder_name, (void *)f};
    return s;
}
