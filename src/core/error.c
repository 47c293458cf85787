#include "vitc/error.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Sets e's message (from fmt and ap) and code unless a message is set already. */
static void set_first(vt_err *e, int code, const char *fmt, va_list ap) {
    if (!e || e->msg[0] != '\0') return;
    vt_msg_vformat(e->msg, sizeof e->msg, fmt, ap);
    e->code = code;
}

int vt_seterr(vt_err *e, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    set_first(e, VT_E_FAILED, fmt, ap);
    va_end(ap);
    return -1;
}

int vt_seterr_code(vt_err *e, int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    set_first(e, code, fmt, ap);
    va_end(ap);
    return -1;
}

int vt_seterr_from(vt_err *e, const vt_err *cause, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    set_first(e, cause ? cause->code : VT_E_FAILED, fmt, ap);
    va_end(ap);
    return -1;
}

void vt_fputs_clean(FILE *f, const char *s) {
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (vt_c1_at(p)) {
            fprintf(f, "\\u%04x", p[1]);
            p++;
        } else if (*p == '\n') {
            fputs("\\n", f);
        } else if (*p == '\t') {
            fputs("\\t", f);
        } else if (*p < 0x20 || *p == 0x7f) {
            fprintf(f, "\\x%02x", *p);
        } else {
            fputc(*p, f);
        }
    }
}

void vt_msg_vformat(char *msg, size_t size, const char *fmt, va_list ap) {
    char stack[8192], *full = stack;
    va_list aq;
    va_copy(aq, ap);
    const int n = vsnprintf(stack, sizeof stack, fmt, ap);
    if (n >= (int)sizeof stack) { /* a longer message (a path of thousands of bytes) is formatted whole: its reason,
                                   * at the end, is kept; out of memory: the stack's cut, less its last character,
                                   * which may be cut */
        if ((full = malloc((size_t)n + 1)) != NULL) {
            vsnprintf(full, (size_t)n + 1, fmt, aq);
        } else {
            size_t end = sizeof stack - 1;
            while (end > 0 && ((unsigned char)stack[end - 1] & 0xC0) == 0x80) end--;
            stack[end > 0 ? end - 1 : 0] = '\0';
            full = stack;
        }
    }
    va_end(aq);
    const size_t len = n < 0 ? 0 : strlen(full);
    if (size > 0 && (len < size || size < 8)) {
        snprintf(msg, size, "%s", n < 0 ? "" : full);
    } else if (size > 0) {
        /* three quarters from the start (the cause and the first names), the rest from the end (a reason after a
         * long path); "..." and the NUL besides the kept bytes */
        size_t head = (size - 4) * 3 / 4, tail = len - (size - 4 - head);
        while (head > 0 && ((unsigned char)full[head] & 0xC0) == 0x80) head--; /* full[head] starts a character */
        while (tail < len && ((unsigned char)full[tail] & 0xC0) == 0x80) tail++;
        memcpy(msg, full, head);
        memcpy(msg + head, "...", 3);
        memcpy(msg + head + 3, full + tail, len - tail + 1);
    }
    if (full != stack) free(full);
}

void vt_write_line(FILE *f, const char *lead, const char *text, int clean) {
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    FILE *o = m ? m : f; /* (out of memory: in pieces) */
    fputs(lead, o);
    if (clean) vt_fputs_clean(o, text);
    else fputs(text, o);
    fputc('\n', o);
    if (m && fclose(m) == 0 && buf) {
        fputs(buf, f);
    } else if (m) { /* (the memory stream failed: in pieces) */
        fputs(lead, f);
        if (clean) vt_fputs_clean(f, text);
        else fputs(text, f);
        fputc('\n', f);
    }
    free(buf);
}

const char *vt_path_brief(const char *path, char *buf, size_t n) {
    const size_t len = strlen(path);
    if (len < n || n < 8) return path;
    size_t from = len - (n - 4); /* "..." and the NUL */
    while (from < len && ((unsigned char)path[from] & 0xC0) == 0x80) from++;
    snprintf(buf, n, "...%s", path + from);
    return buf;
}

void vt_clearerr(vt_err *e) {
    if (e) {
        e->msg[0] = '\0';
        e->code = VT_E_FAILED;
    }
}

void *vt_alloc(size_t n, vt_err *e) {
    if (n > SIZE_MAX - 63) return vt_seterr_code(e, VT_E_NOMEM, "out of memory allocating %zu bytes", n), NULL;
    size_t sz = (n + 63) / 64 * 64;
    if (sz == 0) sz = 64;
    void *p = aligned_alloc(64, sz);
    if (!p) {
        vt_seterr_code(e, VT_E_NOMEM, "out of memory allocating %zu bytes", n);
        return NULL;
    }
    memset(p, 0, sz);
    return p;
}

void vt_free(void *p) { free(p); }

int vt_mul_overflow(size_t a, size_t b, size_t *out) {
    if (a != 0 && b > (size_t)-1 / a) return -1;
    *out = a * b;
    return 0;
}

/* Restricted Damerau-Levenshtein distance of a and b (lengths up to 64), case ignored; stops early, returning cap + 1,
 * once every prefix pair is past cap. */
static int edit_distance(const char *a, size_t na, const char *b, size_t nb, int cap) {
    int d[3][65]; /* rows i-2, i-1, i of the distance table, by i % 3 */
    for (size_t j = 0; j <= nb; j++) d[0][j] = (int)j;
    for (size_t i = 1; i <= na; i++) {
        int *r = d[i % 3], *p = d[(i - 1) % 3], *pp = d[(i + 1) % 3], low = r[0] = (int)i;
        for (size_t j = 1; j <= nb; j++) {
            const int ca = tolower((unsigned char)a[i - 1]), cb = tolower((unsigned char)b[j - 1]);
            int v = p[j - 1] + (ca != cb);
            if (p[j] + 1 < v) v = p[j] + 1;
            if (r[j - 1] + 1 < v) v = r[j - 1] + 1;
            if (i > 1 && j > 1 && ca == tolower((unsigned char)b[j - 2]) && tolower((unsigned char)a[i - 2]) == cb &&
                pp[j - 2] + 1 < v)
                v = pp[j - 2] + 1;
            r[j] = v;
            if (v < low) low = v;
        }
        if (low > cap) return cap + 1;
    }
    return d[na % 3][nb];
}

void vt_nearest_try(vt_nearest *s, const char *name, size_t len) {
    const size_t nw = s->word ? strlen(s->word) : 0;
    if (nw == 0 || nw > 64 || len == 0 || len > 64) return;
    const int cap = nw / 3 > 1 ? (int)(nw / 3) : 1;
    const int d = edit_distance(s->word, nw, name, len, cap);
    size_t k = 0;
    while (k < nw && k < len && tolower((unsigned char)s->word[k]) == tolower((unsigned char)name[k])) k++;
    const int begins = nw >= 3 && k == nw && len > nw;
    if (d > cap && !begins) return;
    /* one edit first, then a name the word begins (the shortest first), then two edits or more */
    const int score = d <= 1 || !begins ? 1000 * (d + (d > 1)) : 2000 + (int)(len - nw);
    if (!s->best || score < s->score) {
        s->best = name;
        s->best_len = (int)len;
        s->score = score;
    }
}

const char *vt_nearest_hint(const vt_nearest *s, char *buf, size_t n) {
    if (n == 0) return buf;
    buf[0] = '\0';
    if (s->best) snprintf(buf, n, "did you mean '%.*s'? ", s->best_len, s->best);
    return buf;
}
