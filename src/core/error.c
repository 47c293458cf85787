#include "vitc/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int vt_seterr(vt_err *e, const char *fmt, ...) {
    if (e && e->msg[0] == '\0') {
        va_list ap;
        va_start(ap, fmt);
        vt_msg_fit(e->msg, sizeof e->msg, vsnprintf(e->msg, sizeof e->msg, fmt, ap));
        va_end(ap);
    }
    return -1;
}

void vt_fputs_clean(FILE *f, const char *s) {
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (p[0] == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f) { /* a C1 control in UTF-8 (U+0080..U+009F, e.g. CSI) */
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

void vt_msg_fit(char *msg, size_t size, int needed) {
    if (needed < 0 || (size_t)needed < size || size < 4) return;
    size_t end = size - 4; /* "..." and the NUL after the kept bytes */
    while (end > 0 && ((unsigned char)msg[end] & 0xC0) == 0x80) end--; /* msg[end] starts a character */
    memcpy(msg + end, "...", 4);
}

void vt_clearerr(vt_err *e) {
    if (e) e->msg[0] = '\0';
}

void *vt_alloc(size_t n, vt_err *e) {
    size_t sz = (n + 63) / 64 * 64;
    if (sz == 0) sz = 64;
    void *p = aligned_alloc(64, sz);
    if (!p) {
        vt_seterr(e, "out of memory allocating %zu bytes", n);
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
