/* Strict safetensors reader and atomic writer (rules in include/vitc/safetensors.h). */
#include "vitc/safetensors.h"

#include "vitc/fileio.h"

#include <cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "vitc's safetensors code assumes a little-endian host"
#endif

/* Largest integer a JSON number (double) represents exactly; offsets and dims must not exceed it. */
#define MAX_JSON_INT 9007199254740992.0

static const struct {
    const char *name;
    size_t size;
} dtypes[VT_ST_NDTYPE] = {
    {"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8},
    {"I32", 4}, {"I16", 2}, {"I8", 1},  {"U8", 1},   {"BOOL", 1},
};

const char *vt_st_dtype_name(vt_st_dtype d) { return (unsigned)d < VT_ST_NDTYPE ? dtypes[d].name : "?"; }

/* ---------------------------------------------------------------- helpers */

static uint64_t le64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

size_t vt_utf8_next(const uint8_t *s, size_t n, uint32_t *cp) {
    if (n == 0) return 0;
    const uint8_t c = s[0];
    size_t k;
    uint32_t v, min;
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    if ((c & 0xE0) == 0xC0) { k = 1; v = c & 0x1F; min = 0x80; }
    else if ((c & 0xF0) == 0xE0) { k = 2; v = c & 0x0F; min = 0x800; }
    else if ((c & 0xF8) == 0xF0) { k = 3; v = c & 0x07; min = 0x10000; }
    else return 0;
    if (n <= k) return 0;
    for (size_t j = 1; j <= k; j++) { /* a NUL or any byte that continues nothing stops here: nothing past it read */
        if ((s[j] & 0xC0) != 0x80) return 0;
        v = (v << 6) | (s[j] & 0x3F);
    }
    if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return 0;
    *cp = v;
    return k + 1;
}

int vt_utf8_valid(const uint8_t *s, size_t n, size_t *bad) {
    uint32_t cp;
    for (size_t i = 0, k; i < n; i += k)
        if (!(k = vt_utf8_next(s + i, n - i, &cp))) {
            *bad = i;
            return 0;
        }
    return 1;
}

/* s with bytes outside printable ASCII written as \xNN, cut to fit buf[n] (for messages about invalid strings). */
static const char *escaped(const char *s, char *buf, size_t n) {
    size_t o = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p && o + 5 < n; p++)
        if (*p < 0x20 || *p >= 0x7f) o += (size_t)snprintf(buf + o, n - o, "\\x%02x", *p);
        else buf[o++] = (char)*p;
    buf[o] = '\0';
    return buf;
}

/* The writer's check of a metadata key or value, or a tensor name: valid UTF-8, so that the reader accepts it. */
static int check_utf8(const char *s, const char *what, const char *key, vt_err *e) {
    size_t bad;
    char shown[200];
    if (vt_utf8_valid((const uint8_t *)s, strlen(s), &bad)) return 0;
    return vt_seterr(e, "%s '%s' is not valid UTF-8 (byte 0x%02x at offset %zu)", what,
                     escaped(key, shown, sizeof shown), (unsigned char)s[bad], bad);
}

/* A JSON number that is a non-negative integer <= 2^53, into *out; 0 on success, -1 otherwise. */
static int json_uint(const cJSON *v, uint64_t *out) {
    if (!cJSON_IsNumber(v)) return -1;
    double d = v->valuedouble;
    if (!(d >= 0.0 && d <= MAX_JSON_INT)) return -1; /* also rejects NaN */
    uint64_t u = (uint64_t)d;
    if ((double)u != d) return -1;
    *out = u;
    return 0;
}

/* Checks every number in a parsed header is written as a plain non-negative integer of at most 2^53 ("0" or digits
 * without a leading zero): cJSON reads 10.0, 1e1, -0 and 010 as integers, and 2^53 + 1 as 2^53. The numbers are
 * the entries' shapes and data_offsets; errors name the tensor (the top-level key) whose entry holds the number. */
static int check_numbers(const char *h, size_t n, vt_err *e) {
    int depth = 0;
    const char *str = NULL, *key = NULL; /* the last string at depth 1 and the top-level key now open */
    size_t str_len = 0, key_len = 0;
    for (size_t i = 0; i < n; i++) {
        const char c = h[i];
        if (c == '"') {
            const size_t start = ++i;
            while (i < n && h[i] != '"') i += h[i] == '\\' ? 2 : 1;
            if (depth == 1) str = h + start, str_len = i - start;
        } else if (c == ':' && depth == 1) {
            key = str, key_len = str_len;
        } else if (c == '{' || c == '[') {
            depth++;
        } else if (c == '}' || c == ']') {
            depth--;
        } else if (c == '-' || (c >= '0' && c <= '9')) {
            size_t j = i;
            uint64_t v = 0;
            int plain = c != '-' && !(c == '0' && i + 1 < n && h[i + 1] >= '0' && h[i + 1] <= '9');
            while (j < n && h[j] && strchr("0123456789+-.eE", h[j])) {
                if (h[j] < '0' || h[j] > '9') plain = 0;
                else if (v <= (uint64_t)MAX_JSON_INT) v = v * 10 + (uint64_t)(h[j] - '0');
                j++;
            }
            if (!plain || v > (uint64_t)MAX_JSON_INT)
                return vt_seterr(e, "tensor '%.*s': the number %.*s in its entry is not %s",
                                 (int)(key_len < 64 ? key_len : 64), key ? key : "", (int)(j - i < 32 ? j - i : 32),
                                 h + i,
                                 plain ? "at most 2^53" : "written as a non-negative integer (digits only)");
            i = j - 1;
        }
    }
    return 0;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

/* Returns a duplicated key among the children of obj, NULL when none (or -1 via *err on OOM). */
static const char *find_duplicate_key(const cJSON *obj, int *oom) {
    int n = 0;
    *oom = 0;
    for (const cJSON *c = obj->child; c; c = c->next) n++;
    if (n < 2) return NULL;
    const char **keys = malloc((size_t)n * sizeof *keys);
    if (!keys) { *oom = 1; return NULL; }
    int i = 0;
    for (const cJSON *c = obj->child; c; c = c->next) keys[i++] = c->string ? c->string : "";
    qsort(keys, (size_t)n, sizeof *keys, cmp_str);
    const char *dup = NULL;
    for (i = 1; i < n && !dup; i++)
        if (strcmp(keys[i - 1], keys[i]) == 0) dup = keys[i];
    free(keys);
    return dup;
}

static char *xstrdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *p = malloc(n);
    if (p) memcpy(p, s, n);
    return p;
}

/* Writes "(a, b, c)" for an int64 shape into buf. */
static const char *shape_str(int ndim, const int64_t *shape, char *buf, size_t len) {
    size_t o = 0;
    o += (size_t)snprintf(buf + o, len - o, "(");
    for (int i = 0; i < ndim && o < len; i++)
        o += (size_t)snprintf(buf + o, len - o, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (o < len) snprintf(buf + o, len - o, ")");
    return buf;
}

void vt_st_close(vt_st_file *f) {
    if (!f) return;
    if (f->opened) close(f->fd);
    free(f->buf);
    free(f->entries);
    free(f->sorted);
    for (int i = 0; i < f->n_meta; i++) {
        free(f->meta_keys[i]);
        free(f->meta_vals[i]);
    }
    free(f->meta_keys);
    free(f->meta_vals);
    memset(f, 0, sizeof *f);
}

/* ---------------------------------------------------------------- header parsing */

static int parse_metadata(const cJSON *m, vt_st_file *f, vt_err *e) {
    if (!cJSON_IsObject(m)) return vt_seterr(e, "__metadata__ is not a JSON object");
    int oom;
    const char *dup = find_duplicate_key(m, &oom);
    if (oom) return vt_seterr_code(e, VT_E_NOMEM, "out of memory reading __metadata__");
    if (dup) return vt_seterr(e, "duplicate key '%.64s' in __metadata__", dup);
    int n = 0;
    for (const cJSON *c = m->child; c; c = c->next) {
        if (!cJSON_IsString(c) || !c->valuestring)
            return vt_seterr(e, "__metadata__ value for key '%.64s' is not a string", c->string ? c->string : "");
        n++;
    }
    if (n == 0) return 0;
    f->meta_keys = calloc((size_t)n, sizeof(char *));
    f->meta_vals = calloc((size_t)n, sizeof(char *));
    if (!f->meta_keys || !f->meta_vals) return vt_seterr_code(e, VT_E_NOMEM, "out of memory reading __metadata__");
    for (const cJSON *c = m->child; c; c = c->next) {
        f->meta_keys[f->n_meta] = xstrdup(c->string ? c->string : "");
        f->meta_vals[f->n_meta] = xstrdup(c->valuestring);
        f->n_meta++;
        if (!f->meta_keys[f->n_meta - 1] || !f->meta_vals[f->n_meta - 1])
            return vt_seterr_code(e, VT_E_NOMEM, "out of memory reading __metadata__");
    }
    return 0;
}

static int parse_entry(const cJSON *c, vt_st_entry *t, vt_err *e) {
    const char *name = c->string ? c->string : "";
    size_t nl = strlen(name);
    if (nl == 0) return vt_seterr(e, "tensor name is empty");
    if (nl >= VT_NAMELEN)
        return vt_seterr(e, "tensor name '%.40s...' is too long (%zu bytes, max %d)", name, nl, VT_NAMELEN - 1);
    memcpy(t->name, name, nl + 1);
    if (!cJSON_IsObject(c)) return vt_seterr(e, "tensor '%s': entry is not a JSON object", name);
    int oom;
    const char *dup = find_duplicate_key(c, &oom);
    if (oom) return vt_seterr_code(e, VT_E_NOMEM, "out of memory reading tensor '%s'", name);
    if (dup) return vt_seterr(e, "tensor '%s': duplicate key '%.64s'", name, dup);

    const cJSON *dt = NULL, *sh = NULL, *off = NULL;
    for (const cJSON *k = c->child; k; k = k->next) {
        const char *kn = k->string ? k->string : "";
        if (strcmp(kn, "dtype") == 0) dt = k;
        else if (strcmp(kn, "shape") == 0) sh = k;
        else if (strcmp(kn, "data_offsets") == 0) off = k;
        else return vt_seterr(e, "tensor '%s': unknown field '%.64s'", name, kn);
    }
    if (!dt) return vt_seterr(e, "tensor '%s': missing field 'dtype'", name);
    if (!sh) return vt_seterr(e, "tensor '%s': missing field 'shape'", name);
    if (!off) return vt_seterr(e, "tensor '%s': missing field 'data_offsets'", name);

    if (!cJSON_IsString(dt) || !dt->valuestring) return vt_seterr(e, "tensor '%s': dtype is not a string", name);
    int d = -1;
    for (int i = 0; i < VT_ST_NDTYPE; i++)
        if (strcmp(dt->valuestring, dtypes[i].name) == 0) d = i;
    if (d < 0) return vt_seterr(e, "tensor '%s': unknown dtype '%.32s'", name, dt->valuestring);
    t->dtype = (vt_st_dtype)d;

    if (!cJSON_IsArray(sh)) return vt_seterr(e, "tensor '%s': shape is not an array", name);
    int nd = cJSON_GetArraySize(sh);
    if (nd > VT_ST_MAXDIM) return vt_seterr(e, "tensor '%s': shape has %d dims (max %d)", name, nd, VT_ST_MAXDIM);
    t->ndim = nd;
    uint64_t nbytes = dtypes[d].size, numel = 1;
    int i = 0;
    for (const cJSON *v = sh->child; v; v = v->next, i++) {
        uint64_t dim;
        if (json_uint(v, &dim) != 0)
            return vt_seterr(e, "tensor '%s': shape[%d] is not a non-negative integer of at most 2^53", name, i);
        t->shape[i] = (int64_t)dim;
        if (dim != 0 && numel > UINT64_MAX / dim) numel = UINT64_MAX; /* saturate; checked below */
        else numel *= dim;
    }
    for (i = 0; i < nd; i++)
        if (t->shape[i] == 0) numel = 0;
    char sb[160];
    if (numel > (uint64_t)MAX_JSON_INT || numel > UINT64_MAX / nbytes)
        return vt_seterr(e, "tensor '%s': shape %s overflows the size limit", name, shape_str(nd, t->shape, sb, sizeof sb));
    nbytes *= numel;
    t->numel = (int64_t)numel;

    if (!cJSON_IsArray(off) || cJSON_GetArraySize(off) != 2)
        return vt_seterr(e, "tensor '%s': data_offsets must be an array of exactly 2 non-negative integers", name);
    if (json_uint(off->child, &t->begin) != 0 || json_uint(off->child->next, &t->end) != 0)
        return vt_seterr(e, "tensor '%s': data_offsets must be an array of exactly 2 non-negative integers", name);
    if (t->begin > t->end)
        return vt_seterr(e, "tensor '%s': data_offsets begin %llu > end %llu", name, (unsigned long long)t->begin,
                         (unsigned long long)t->end);
    if (nbytes != t->end - t->begin)
        return vt_seterr(e, "tensor '%s': size mismatch: shape %s of %s needs %llu bytes but data_offsets span %llu",
                         name, shape_str(nd, t->shape, sb, sizeof sb), dtypes[d].name, (unsigned long long)nbytes,
                         (unsigned long long)(t->end - t->begin));
    return 0;
}

typedef struct {
    uint64_t begin, end;
    int idx;
} span;

static int cmp_span(const void *a, const void *b) {
    const span *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return x->idx - y->idx;
}

static int cmp_entry_name(const void *a, const void *b) {
    return strcmp((*(const vt_st_entry *const *)a)->name, (*(const vt_st_entry *const *)b)->name);
}

/* What a file that starts with buf (len bytes) is, where its first bytes say so and it is no safetensors file ("a PNG
 * image"); NULL otherwise. */
static const char *other_format(const uint8_t *buf, size_t len) {
    static const struct {
        const char *magic, *what;
        size_t n;
    } known[] = {{"\x89PNG\r\n\x1a\n", "a PNG image", 8}, {"\xff\xd8\xff", "a JPEG image", 3},
                 {"GIF8", "a GIF image", 4}, {"\x93NUMPY", "a NumPy array file", 6}, {"\x1f\x8b", "a gzip file", 2},
                 {"\x7f" "ELF", "an executable", 4}};
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (len >= known[i].n && memcmp(buf, known[i].magic, known[i].n) == 0) return known[i].what;
    return NULL;
}

/* Validates the image buf[0..len) (owned: kept in f on success, freed on error). fd >= 0: buf holds the first len
 * bytes of that open regular file of flen bytes (its header, whole where its length prefix is sound), whose tensors
 * are read from it when asked; kept in f on success, closed on error. fd < 0: buf is the whole file (flen == len). */
static int parse_owned(uint8_t *buf, size_t len, int fd, uint64_t flen, vt_st_file *f, vt_err *e) {
    memset(f, 0, sizeof *f);
    f->buf = buf;
    f->len = len;
    f->opened = fd >= 0;
    f->fd = fd;
    cJSON *root = NULL;
    span *spans = NULL;
    const vt_st_entry **by_name = NULL;
    int rc = -1;

    /* a torch.save file (a zip archive, or a pickle of protocol 2-5) that is no safetensors file: its first bytes
     * read as a header length, the header would not fit or not start with '{' */
    if (len >= 4 && (memcmp(buf, "PK\x03\x04", 4) == 0 || (buf[0] == 0x80 && buf[1] >= 2 && buf[1] <= 5)) &&
        (len < 9 || le64(buf) > VT_ST_MAX_HEADER || le64(buf) > len - 8 || buf[8] != '{')) {
        vt_seterr(e, "not safetensors but %s (a PyTorch checkpoint, as torch.save writes them?): convert it with "
                  "/usr/bin/python3 tools/convert_checkpoint.py", buf[0] == 0x80 ? "a Python pickle" : "a zip archive");
        goto done;
    }
    const char *other = other_format(buf, len);
    if (other && (len < 9 || le64(buf) > len - 8 || buf[8] != '{')) {
        vt_seterr(e, "not a safetensors file but %s (safetensors files start with an 8-byte header length and a JSON "
                  "header)", other);
        goto done;
    }
    if (flen < 8) {
        vt_seterr(e, "truncated file: %llu bytes, need at least 8 for the header length", (unsigned long long)flen);
        goto done;
    }
    uint64_t hn = le64(buf);
    if (hn > VT_ST_MAX_HEADER) {
        vt_seterr(e, "header too large: %llu bytes (limit %u)", (unsigned long long)hn, VT_ST_MAX_HEADER);
        goto done;
    }
    if (hn > flen - 8 || hn > len - 8) {
        vt_seterr(e, "truncated file: header length %llu is larger than the %llu bytes after the length prefix",
                  (unsigned long long)hn, (unsigned long long)(flen - 8));
        goto done;
    }
    const uint8_t *hdr = buf + 8;
    size_t hlen = (size_t)hn;
    if (hlen == 0 || hdr[0] != '{') {
        vt_seterr(e, "header is not a JSON object: it must start with '{'");
        goto done;
    }
    const void *nul = memchr(hdr, 0, hlen);
    if (nul) {
        vt_seterr(e, "invalid JSON header: NUL byte at header offset %td", (const uint8_t *)nul - hdr);
        goto done;
    }
    size_t bad;
    if (!vt_utf8_valid(hdr, hlen, &bad)) {
        vt_seterr(e, "invalid JSON header: not valid UTF-8 at header offset %zu", bad);
        goto done;
    }
    const long esc = vt_json_escaped_nul(hdr, hlen);
    if (esc >= 0) {
        vt_seterr(e, "invalid JSON header: an escaped NUL (\\u0000) at header offset %ld", esc);
        goto done;
    }
    const char *endp = NULL;
    root = cJSON_ParseWithLengthOpts((const char *)hdr, hlen, &endp, 0);
    if (!root) {
        long at = endp ? (long)(endp - (const char *)hdr) : -1;
        vt_seterr(e, "invalid JSON header (parse error near header offset %ld)", at);
        goto done;
    }
    for (const char *p = endp; p < (const char *)hdr + hlen; p++) {
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
            vt_seterr(e, "invalid JSON header: unexpected characters after the object at header offset %td",
                      p - (const char *)hdr);
            goto done;
        }
    }
    if (!cJSON_IsObject(root)) {
        vt_seterr(e, "header is not a JSON object");
        goto done;
    }
    int oom;
    const char *dup = find_duplicate_key(root, &oom);
    if (oom) {
        vt_seterr_code(e, VT_E_NOMEM, "out of memory reading header");
        goto done;
    }
    if (dup) {
        vt_seterr(e, "duplicate key '%.64s' in header", dup);
        goto done;
    }

    int n = 0;
    for (const cJSON *c = root->child; c; c = c->next)
        if (!c->string || strcmp(c->string, "__metadata__") != 0) n++;
    f->entries = calloc(n ? (size_t)n : 1, sizeof *f->entries);
    f->sorted = calloc(n ? (size_t)n : 1, sizeof *f->sorted);
    spans = calloc(n ? (size_t)n : 1, sizeof *spans);
    by_name = calloc(n ? (size_t)n : 1, sizeof *by_name);
    if (!f->entries || !f->sorted || !spans || !by_name) {
        vt_seterr_code(e, VT_E_NOMEM, "out of memory reading header");
        goto done;
    }
    for (const cJSON *c = root->child; c; c = c->next) {
        if (c->string && strcmp(c->string, "__metadata__") == 0) {
            if (parse_metadata(c, f, e) != 0) goto done;
            continue;
        }
        if (parse_entry(c, &f->entries[f->n], e) != 0) goto done;
        f->n++;
    }
    if (check_numbers((const char *)hdr, hlen, e) != 0) goto done;

    /* Offsets must tile the data section exactly. */
    const uint8_t *data = fd >= 0 ? NULL : hdr + hlen;
    uint64_t dlen = flen - 8 - hlen;
    for (int i = 0; i < n; i++) {
        vt_st_entry *t = &f->entries[i];
        if (t->end > dlen) {
            vt_seterr(e, "tensor '%s': data_offsets [%llu, %llu] out of range: data section has %llu bytes (truncated file?)",
                      t->name, (unsigned long long)t->begin, (unsigned long long)t->end, (unsigned long long)dlen);
            goto done;
        }
        t->data = data ? data + t->begin : NULL;
        t->fd = fd;
        t->off = 8 + hlen + t->begin;
        spans[i] = (span){t->begin, t->end, i};
    }
    qsort(spans, (size_t)n, sizeof *spans, cmp_span);
    uint64_t pos = 0;
    for (int i = 0; i < n; i++) {
        const char *nm = f->entries[spans[i].idx].name;
        if (spans[i].begin > pos) {
            if (i == 0)
                vt_seterr(e, "gap in data: tensor '%s' starts at %llu, the first tensor must start at 0", nm,
                          (unsigned long long)spans[i].begin);
            else
                vt_seterr(e, "gap in data: tensor '%s' ends at %llu but tensor '%s' starts at %llu",
                          f->entries[spans[i - 1].idx].name, (unsigned long long)pos, nm,
                          (unsigned long long)spans[i].begin);
            goto done;
        }
        if (spans[i].begin < pos) {
            vt_seterr(e, "overlap in data: tensor '%s' starts at %llu inside tensor '%s' (ends at %llu)", nm,
                      (unsigned long long)spans[i].begin, f->entries[spans[i - 1].idx].name, (unsigned long long)pos);
            goto done;
        }
        pos = spans[i].end;
    }
    if (pos != dlen) {
        if (n)
            vt_seterr(e, "trailing bytes: %llu bytes after the last tensor '%s' (data section %llu bytes)",
                      (unsigned long long)(dlen - pos), f->entries[spans[n - 1].idx].name, (unsigned long long)dlen);
        else
            vt_seterr(e, "trailing bytes: %llu bytes of data but the header lists no tensor", (unsigned long long)dlen);
        goto done;
    }

    for (int i = 0; i < n; i++) by_name[i] = &f->entries[i];
    qsort(by_name, (size_t)n, sizeof *by_name, cmp_entry_name);
    for (int i = 0; i < n; i++) f->sorted[i] = (int)(by_name[i] - f->entries);
    rc = 0;
done:
    cJSON_Delete(root);
    free(spans);
    free(by_name);
    if (rc != 0) vt_st_close(f);
    return rc;
}

int vt_st_parse(const uint8_t *buf, size_t len, vt_st_file *f, vt_err *e) {
    memset(f, 0, sizeof *f);
    if (!buf && len) return vt_seterr(e, "vt_st_parse: NULL buffer");
    /* Plain malloc of exactly len bytes (not vt_alloc's rounded size) so ASan/fuzzing see overreads;
     * alignment does not matter since tensor data may sit at any offset anyway. */
    uint8_t *copy = malloc(len ? len : 1);
    if (!copy) return vt_seterr_code(e, VT_E_NOMEM, "out of memory copying %zu bytes", len);
    if (len) memcpy(copy, buf, len);
    return parse_owned(copy, len, -1, len, f, e);
}

long vt_json_escaped_nul(const unsigned char *s, size_t n) {
    for (size_t k = 0; k + 1 < n; k++)
        if (s[k] == '\\') {
            if (k + 5 < n && s[k + 1] == 'u' && memcmp(s + k + 2, "0000", 4) == 0) return (long)k;
            k++; /* the escaped character: an escaped backslash followed by u0000 is text */
        }
    return -1;
}

/* The size of a safetensors stream from its first len bytes (vt_size_fn): the 8-byte length, then the header, then the
 * data up to the largest data_offsets end, and one byte more (parse_owned refuses trailing bytes). A header that is
 * too long or does not parse ends the reading: parse_owned says why. */
static size_t st_size(const unsigned char *b, size_t len, void *arg) {
    (void)arg;
    if (len < 8) return 8;
    const uint64_t hn = le64(b);
    if (hn > VT_ST_MAX_HEADER) return len;
    if (len < 8 + hn) return 8 + (size_t)hn;
    cJSON *root = cJSON_ParseWithLength((const char *)b + 8, (size_t)hn);
    double end = 0.0;
    const cJSON *t = NULL;
    cJSON_ArrayForEach(t, root) {
        const cJSON *o = cJSON_GetObjectItemCaseSensitive(t, "data_offsets");
        const cJSON *hi = cJSON_IsArray(o) ? cJSON_GetArrayItem(o, 1) : NULL;
        if (cJSON_IsNumber(hi) && hi->valuedouble > end) end = hi->valuedouble;
    }
    cJSON_Delete(root);
    return end < (double)(SIZE_MAX / 4) ? 8 + (size_t)hn + (size_t)end + 1 : len;
}

/* Reads n bytes at offset `at` of fd into dst; -1 where the file ends first or the read fails. */
static int read_at(int fd, uint64_t at, void *dst, size_t n) {
    for (size_t k = 0; k < n;) {
        const ssize_t r = pread(fd, (uint8_t *)dst + k, n - k, (off_t)(at + k));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return -1;
        k += (size_t)r;
    }
    return 0;
}

/* Opens the regular file at path and reads its header: into *buf (*len bytes) and *flen, the descriptor returned;
 * -1 where path is no regular file or cannot be opened (the caller reads it as a stream then, saying why), -2 with e
 * set where reading a regular file's header failed. Loading reads a tensor at a time rather than the whole file, so
 * that the file's bytes are never resident beside the parameters (vitc predict with DeiT-B's 346 MB of weights had
 * peaked at 684 MiB, the file read whole), and from a descriptor rather than a mapping, where a file shortened by
 * another program raised SIGBUS in the host process. */
static int open_header(const char *path, uint8_t **buf, size_t *len, uint64_t *flen, vt_err *e) {
    _Static_assert(sizeof(off_t) >= 8, "pread offsets of files over 2 GiB need a 64-bit off_t");
    struct stat st;
    /* a FIFO is not opened here: that open would release a writer waiting for its reader, and closing it again
     * would cost the writer its SIGPIPE or its data before vt_read_sized's open */
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) return -1;
    const int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return -1;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size < 0) {
        close(fd);
        return -1;
    }
    uint8_t pre[16];
    *flen = (uint64_t)st.st_size;
    size_t n = *flen < sizeof pre ? (size_t)*flen : sizeof pre;
    errno = 0;
    if (read_at(fd, 0, pre, n) == 0) {
        const uint64_t hn = n >= 8 ? le64(pre) : 0;
        /* the header whole where its length is sound, else the first bytes (parse_owned says what is wrong) */
        if (n >= 8 && hn <= VT_ST_MAX_HEADER && hn <= *flen - 8) n = 8 + (size_t)hn;
        if (!(*buf = malloc(n ? n : 1))) {
            close(fd);
            return vt_seterr_code(e, VT_E_NOMEM, "%s: out of memory reading its header (%zu bytes)", path, n), -2;
        }
        if (read_at(fd, 0, *buf, n) == 0) {
            *len = n;
            return fd;
        }
        free(*buf);
        *buf = NULL;
    }
    close(fd);
    return vt_seterr_code(e, VT_E_IO, "%s: %s reading its header", path,
                          errno ? strerror(errno) : "end of file (shortened while being opened?)"), -2;
}

int vt_st_open(const char *path, vt_st_file *f, vt_err *e) {
    memset(f, 0, sizeof *f);
    unsigned char *buf = NULL;
    size_t len = 0;
    uint64_t flen = 0;
    vt_err local = {0};
    const int fd = open_header(path, &buf, &len, &flen, &local);
    if (fd == -2) return vt_seterr_from(e, &local, "%s", local.msg);
    if (fd < 0 && vt_read_sized(path, SIZE_MAX / 2, st_size, NULL, &buf, &len, &local) != 0)
        return vt_seterr_from(e, &local, "%s", local.msg);
    if (parse_owned(buf, len, fd, fd >= 0 ? flen : len, f, &local) != 0)
        return vt_seterr_from(e, &local, "%s: %s", path, local.msg);
    return 0;
}

const vt_st_entry *vt_st_find(const vt_st_file *f, const char *name) {
    int lo = 0, hi = f->n - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        const vt_st_entry *t = &f->entries[f->sorted[mid]];
        int c = strcmp(name, t->name);
        if (c == 0) return t;
        if (c < 0) hi = mid - 1;
        else lo = mid + 1;
    }
    return NULL;
}

const char *vt_st_meta(const vt_st_file *f, const char *key) {
    for (int i = 0; i < f->n_meta; i++)
        if (strcmp(f->meta_keys[i], key) == 0) return f->meta_vals[i];
    return NULL;
}

/* ---------------------------------------------------------------- conversion */

/* IEEE half bits to float, exact for every value (subnormals, inf, NaN). */
static float f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1F, man = h & 0x3FF, bits;
    if (exp == 0x1F) {
        bits = sign | 0x7F800000u | (man << 13);
    } else if (exp != 0) {
        bits = sign | ((exp + 112) << 23) | (man << 13);
    } else if (man == 0) {
        bits = sign;
    } else { /* subnormal: normalise */
        int shift = 0;
        while (!(man & 0x400)) {
            man <<= 1;
            shift++;
        }
        man &= 0x3FF;
        bits = sign | ((uint32_t)(113 - shift) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static float bf16_to_f32(uint16_t h) {
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static int check_count(const vt_st_entry *t, int64_t n, vt_err *e) {
    if (n != t->numel)
        return vt_seterr(e, "tensor '%s': element count mismatch: file has %lld, caller expects %lld", t->name,
                         (long long)t->numel, (long long)n);
    return 0;
}

/* Converts n elements of entry t at p to float into out (conv_fn: i0 unused). */
static int conv_f32(const vt_st_entry *t, const uint8_t *p, void *out, int64_t i0, int64_t n, vt_err *e) {
    (void)i0;
    float *dst = out;
    switch (t->dtype) {
    case VT_ST_F32:
        if (n) memcpy(dst, p, (size_t)n * 4);
        return 0;
    case VT_ST_F64:
        for (int64_t i = 0; i < n; i++) {
            double v;
            memcpy(&v, p + 8 * i, 8);
            dst[i] = (float)v;
        }
        return 0;
    case VT_ST_F16:
    case VT_ST_BF16:
        for (int64_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, p + 2 * i, 2);
            dst[i] = t->dtype == VT_ST_F16 ? f16_to_f32(h) : bf16_to_f32(h);
        }
        return 0;
    case VT_ST_I64:
        for (int64_t i = 0; i < n; i++) {
            int64_t v;
            memcpy(&v, p + 8 * i, 8);
            dst[i] = (float)v;
        }
        return 0;
    case VT_ST_I32:
        for (int64_t i = 0; i < n; i++) {
            int32_t v;
            memcpy(&v, p + 4 * i, 4);
            dst[i] = (float)v;
        }
        return 0;
    case VT_ST_I16:
        for (int64_t i = 0; i < n; i++) {
            int16_t v;
            memcpy(&v, p + 2 * i, 2);
            dst[i] = (float)v;
        }
        return 0;
    case VT_ST_I8:
        for (int64_t i = 0; i < n; i++) dst[i] = (float)(int8_t)p[i];
        return 0;
    case VT_ST_U8:
        for (int64_t i = 0; i < n; i++) dst[i] = (float)p[i];
        return 0;
    case VT_ST_BOOL:
        for (int64_t i = 0; i < n; i++) dst[i] = p[i] ? 1.0f : 0.0f;
        return 0;
    default:
        return vt_seterr(e, "tensor '%s': unsupported dtype", t->name);
    }
}

/* Reads entry t's elements [i0, i0 + k) as raw bytes into buf, from memory or from its open file. */
static int fetch(const vt_st_entry *t, int64_t i0, int64_t k, void *buf, vt_err *e) {
    const size_t es = dtypes[t->dtype].size, n = (size_t)k * es;
    if (t->data) {
        if (n) memcpy(buf, t->data + (size_t)i0 * es, n);
        return 0;
    }
    errno = 0;
    if (read_at(t->fd, t->off + (uint64_t)i0 * es, buf, n) == 0) return 0;
    return vt_seterr_code(e, VT_E_IO, "tensor '%s': %s reading its data from the file%s", t->name,
                          errno ? strerror(errno) : "end of file", errno ? "" : " (shortened since it was opened?)");
}

/* A converter of k elements of entry t at p (its elements i0 on) into dst. */
typedef int (*conv_fn)(const vt_st_entry *t, const uint8_t *p, void *dst, int64_t i0, int64_t k, vt_err *e);

/* Converts entry t's n elements into dst (elements of dsize bytes) with conv; where t lies in an open file, in blocks
 * of at most 1 MiB of its bytes (a float32 tensor read into dst directly). */
static int read_blocks(const vt_st_entry *t, void *dst, size_t dsize, int64_t n, conv_fn conv, vt_err *e) {
    if ((unsigned)t->dtype >= VT_ST_NDTYPE) return vt_seterr(e, "tensor '%s': unsupported dtype", t->name);
    if (t->data) return conv(t, t->data, dst, 0, n, e);
    const size_t es = dtypes[t->dtype].size;
    if (t->dtype == VT_ST_F32 && dsize == sizeof(float)) return fetch(t, 0, n, dst, e); /* the bytes are the values */
    const int64_t B = (int64_t)((1u << 20) / es);
    uint8_t *buf = malloc((size_t)(n < B ? (n ? n : 1) : B) * es);
    if (!buf) return vt_seterr_code(e, VT_E_NOMEM, "out of memory reading tensor '%s'", t->name);
    int rc = 0;
    for (int64_t i = 0; rc == 0 && i < n; i += B) {
        const int64_t k = n - i < B ? n - i : B;
        rc = fetch(t, i, k, buf, e) || conv(t, buf, (uint8_t *)dst + (size_t)i * dsize, i, k, e) ? -1 : 0;
    }
    free(buf);
    return rc;
}

int vt_st_read_f32(const vt_st_entry *t, float *dst, int64_t n, vt_err *e) {
    if (check_count(t, n, e) != 0) return -1;
    return read_blocks(t, dst, sizeof(float), n, conv_f32, e);
}

/* Converts a float value to int64 when integral and in range; -1 otherwise. */
static int float_to_i64(double v, int64_t *out) {
    if (!(v >= -9223372036854775808.0 && v < 9223372036854775808.0)) return -1;
    int64_t i = (int64_t)v;
    if ((double)i != v) return -1;
    *out = i;
    return 0;
}

/* Converts k elements of entry t at p (its elements i0 on) to int64 into out (conv_fn). */
static int conv_i64(const vt_st_entry *t, const uint8_t *p, void *out, int64_t i0, int64_t k, vt_err *e) {
    int64_t *dst = out;
    for (int64_t i = 0; i < k; i++) {
        double fv = 0.0;
        int isf = 0;
        switch (t->dtype) {
        case VT_ST_I64: memcpy(&dst[i], p + 8 * i, 8); break;
        case VT_ST_I32: { int32_t v; memcpy(&v, p + 4 * i, 4); dst[i] = v; break; }
        case VT_ST_I16: { int16_t v; memcpy(&v, p + 2 * i, 2); dst[i] = v; break; }
        case VT_ST_I8: dst[i] = (int8_t)p[i]; break;
        case VT_ST_U8: dst[i] = p[i]; break;
        case VT_ST_BOOL: dst[i] = p[i] ? 1 : 0; break;
        case VT_ST_F64: memcpy(&fv, p + 8 * i, 8); isf = 1; break;
        case VT_ST_F32: { float v; memcpy(&v, p + 4 * i, 4); fv = v; isf = 1; break; }
        case VT_ST_F16: { uint16_t h; memcpy(&h, p + 2 * i, 2); fv = f16_to_f32(h); isf = 1; break; }
        case VT_ST_BF16: { uint16_t h; memcpy(&h, p + 2 * i, 2); fv = bf16_to_f32(h); isf = 1; break; }
        default: return vt_seterr(e, "tensor '%s': unsupported dtype", t->name);
        }
        if (isf && float_to_i64(fv, &dst[i]) != 0)
            return vt_seterr(e, "tensor '%s' (%s): element %lld = %g is not an integer", t->name,
                             dtypes[t->dtype].name, (long long)(i0 + i), fv);
    }
    return 0;
}

int vt_st_read_i64(const vt_st_entry *t, int64_t *dst, int64_t n, vt_err *e) {
    if (check_count(t, n, e) != 0) return -1;
    return read_blocks(t, dst, sizeof(int64_t), n, conv_i64, e);
}

/* ---------------------------------------------------------------- writer */

typedef struct {
    char *s;
    size_t n, cap;
    int oom;
} sbuf;

static void sb_put(sbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1) cap *= 2;
        char *p = realloc(b->s, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->s = p;
        b->cap = cap;
    }
    memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = '\0';
}

static void sb_str(sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

/* Appends s as a JSON string literal. */
static void sb_json_string(sbuf *b, const char *s) {
    sb_put(b, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        char esc[8];
        if (*p == '"' || *p == '\\') {
            esc[0] = '\\';
            esc[1] = (char)*p;
            sb_put(b, esc, 2);
        } else if (*p < 0x20) {
            snprintf(esc, sizeof esc, "\\u%04x", *p);
            sb_put(b, esc, 6);
        } else {
            sb_put(b, (const char *)p, 1);
        }
    }
    sb_put(b, "\"", 1);
}

static int cmp_out_name(const void *a, const void *b) {
    return strcmp((*(const vt_st_out *const *)a)->name, (*(const vt_st_out *const *)b)->name);
}

/* Validates the tensors and computes each one's byte size into nbytes[]. */
static int check_outs(const vt_st_out *ts, int n, uint64_t *nbytes, vt_err *e) {
    for (int i = 0; i < n; i++) {
        const vt_st_out *t = &ts[i];
        if (!t->name || !t->name[0]) return vt_seterr(e, "tensor %d has an empty name", i);
        size_t nl = strlen(t->name);
        if (nl >= VT_NAMELEN)
            return vt_seterr(e, "tensor name '%.40s...' is too long (%zu bytes, max %d)", t->name, nl, VT_NAMELEN - 1);
        if (strcmp(t->name, "__metadata__") == 0) return vt_seterr(e, "'__metadata__' is not a valid tensor name");
        if (check_utf8(t->name, "tensor name", t->name, e)) return -1;
        if ((unsigned)t->dtype >= VT_ST_NDTYPE) return vt_seterr(e, "tensor '%s': unknown dtype %d", t->name, (int)t->dtype);
        if (t->ndim < 0 || t->ndim > VT_ST_MAXDIM)
            return vt_seterr(e, "tensor '%s': ndim %d out of range [0, %d]", t->name, t->ndim, VT_ST_MAXDIM);
        uint64_t sz = dtypes[t->dtype].size;
        for (int d = 0; d < t->ndim; d++) {
            if (t->shape[d] < 0 || (double)t->shape[d] > MAX_JSON_INT)
                return vt_seterr(e, "tensor '%s': shape[%d] = %lld is invalid", t->name, d, (long long)t->shape[d]);
            if (t->shape[d] != 0 && sz > (uint64_t)MAX_JSON_INT / (uint64_t)t->shape[d])
                return vt_seterr(e, "tensor '%s': shape overflows the size limit", t->name);
            sz *= (uint64_t)t->shape[d];
        }
        if (sz && !t->data) return vt_seterr(e, "tensor '%s': data is NULL", t->name);
        nbytes[i] = sz;
    }
    if (n > 1) {
        const vt_st_out **s = malloc((size_t)n * sizeof *s);
        if (!s) return vt_seterr_code(e, VT_E_NOMEM, "out of memory");
        for (int i = 0; i < n; i++) s[i] = &ts[i];
        qsort(s, (size_t)n, sizeof *s, cmp_out_name);
        for (int i = 1; i < n; i++) {
            if (strcmp(s[i - 1]->name, s[i]->name) == 0) {
                vt_seterr(e, "duplicate tensor name '%s'", s[i]->name);
                free(s);
                return -1;
            }
        }
        free(s);
    }
    return 0;
}

/* Builds the padded header text into b. */
static int build_header(const vt_st_out *ts, int n, const uint64_t *nbytes, const char *metadata_json, sbuf *b,
                        vt_err *e) {
    sb_str(b, "{");
    int first = 1;
    if (metadata_json) {
        cJSON *m = cJSON_ParseWithOpts(metadata_json, NULL, 1); /* nothing may follow the object */
        if (!m || !cJSON_IsObject(m)) {
            cJSON_Delete(m);
            return vt_seterr(e, "metadata is not a JSON object");
        }
        vt_st_file tmp;
        memset(&tmp, 0, sizeof tmp);
        int rc = parse_metadata(m, &tmp, e);
        for (int i = 0; rc == 0 && i < tmp.n_meta; i++) /* the reader refuses a header that is not UTF-8 */
            rc = check_utf8(tmp.meta_keys[i], "metadata key", tmp.meta_keys[i], e) ||
                         check_utf8(tmp.meta_vals[i], "the value of metadata key", tmp.meta_keys[i], e)
                     ? -1
                     : 0;
        vt_st_close(&tmp);
        char *txt = rc == 0 ? cJSON_PrintUnformatted(m) : NULL;
        cJSON_Delete(m);
        if (rc != 0) return -1;
        if (!txt) return vt_seterr_code(e, VT_E_NOMEM, "out of memory printing metadata");
        sb_str(b, "\"__metadata__\":");
        sb_str(b, txt);
        free(txt);
        first = 0;
    }
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        char num[64];
        if (!first) sb_str(b, ",");
        first = 0;
        sb_json_string(b, ts[i].name);
        sb_str(b, ":{\"dtype\":\"");
        sb_str(b, dtypes[ts[i].dtype].name);
        sb_str(b, "\",\"shape\":[");
        for (int d = 0; d < ts[i].ndim; d++) {
            snprintf(num, sizeof num, "%s%lld", d ? "," : "", (long long)ts[i].shape[d]);
            sb_str(b, num);
        }
        snprintf(num, sizeof num, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)off,
                 (unsigned long long)(off + nbytes[i]));
        sb_str(b, num);
        off += nbytes[i];
    }
    sb_str(b, "}");
    while (!b->oom && b->n % 8) sb_str(b, " "); /* (a failed append adds nothing: it would loop forever) */
    if (b->oom) return vt_seterr_code(e, VT_E_NOMEM, "out of memory building the header");
    if (b->n > VT_ST_MAX_HEADER) return vt_seterr(e, "header too large: %zu bytes (limit %u)", b->n, VT_ST_MAX_HEADER);
    return 0;
}

int vt_st_write(const char *path, const vt_st_out *tensors, int n, const char *metadata_json, vt_err *e) {
    if (n < 0 || (n > 0 && !tensors)) return vt_seterr(e, "%s: invalid tensor list", path);
    uint64_t *nbytes = calloc(n ? (size_t)n : 1, sizeof *nbytes);
    if (!nbytes) return vt_seterr_code(e, VT_E_NOMEM, "out of memory");
    sbuf hb = {0};
    int rc = -1;
    vt_err local = {0};
    if (check_outs(tensors, n, nbytes, &local) != 0 || build_header(tensors, n, nbytes, metadata_json, &hb, &local) != 0) {
        vt_seterr_from(e, &local, "%s: %s", path, local.msg);
        goto done;
    }
    vt_out o;
    if (vt_out_open(&o, path, e)) goto done;
    uint8_t lenb[8];
    for (int i = 0; i < 8; i++) lenb[i] = (uint8_t)((uint64_t)hb.n >> (8 * i));
    int ok = fwrite(lenb, 1, 8, o.f) == 8 && fwrite(hb.s, 1, hb.n, o.f) == hb.n;
    for (int i = 0; ok && i < n; i++)
        if (nbytes[i]) ok = fwrite(tensors[i].data, 1, (size_t)nbytes[i], o.f) == nbytes[i];
    if (!ok) {
        vt_seterr_code(e, VT_E_IO, "cannot write %s: %s", path, strerror(o.err ? o.err : EIO));
        vt_out_abort(&o);
        goto done;
    }
    rc = vt_out_commit(&o, e);
done:
    free(hb.s);
    free(nbytes);
    return rc;
}
