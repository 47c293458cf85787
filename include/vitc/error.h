/* Error reporting: every fallible call takes a vt_err* and returns 0 on success, -1 on error. */
#ifndef VITC_ERROR_H
#define VITC_ERROR_H

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

/* What kind of failure an error is (vt_err.code). Calls classify the failures a caller may want to tell apart; the
 * rest stay VT_E_FAILED. */
enum {
    VT_E_FAILED = 0, /* a failure not classified below (the message says what) */
    VT_E_USAGE = 1,  /* an option or argument that cannot apply here (the CLI's exit status 2) */
    VT_E_IO = 2,     /* the system refused to open, read or write a file (the message gives its reason) */
    VT_E_NOMEM = 3,  /* out of memory */
    VT_E_NONFINITE = 4 /* a computation gave NaN or Inf (weights that overflow on an input) */
};

/* Holds the first error message of a failed call (empty when none) and its kind. Initialise with {0}. */
typedef struct vt_err {
    char msg[1024];
    int code; /* VT_E_*, set with the message */
} vt_err;

/* Formats a message into e (if non-NULL, and only if no message is set yet); always returns -1. */
int vt_seterr(vt_err *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* vt_seterr with the kind of failure (VT_E_*) recorded with the message; always returns -1. */
int vt_seterr_code(vt_err *e, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* vt_seterr with the kind of failure taken from cause (a wrapped error: its code survives the new message); -1. */
int vt_seterr_from(vt_err *e, const vt_err *cause, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Clears the message. */
void vt_clearerr(vt_err *e);

/* vsnprintf of fmt into msg (size bytes); a message that does not fit keeps its start (three quarters) and its end
 * (where a long path is followed by the reason) with "..." between, cut at UTF-8 character boundaries. */
void vt_msg_vformat(char *msg, size_t size, const char *fmt, va_list ap);

/* Writes lead, text (its control characters escaped as vt_fputs_clean does when clean) and a newline to f in one
 * write, so that processes sharing a terminal (MPI ranks) never interleave their lines. */
void vt_write_line(FILE *f, const char *lead, const char *text, int clean);

/* The bytes vitc's weight messages give a path (vt_path_brief's n): one size, so that a caller can find it in them. */
#define VT_PATH_BRIEF 160

/* path for a message: itself when shorter than n bytes, else "..." and its end (cut at a UTF-8 boundary) in buf, so
 * that a long path leaves room for the reason after it. */
const char *vt_path_brief(const char *path, char *buf, size_t n);

/* Writes s to f with its control characters shown as \n, \t, \xNN (bytes below 0x20, 0x7f) or \u00NN (C1 controls in
 * UTF-8), so that a file name inside a message can neither break its line nor start a terminal escape sequence. */
void vt_fputs_clean(FILE *f, const char *s);

/* 1 when p starts a C1 control character in UTF-8 (U+0080..U+009F, bytes C2 80..9F: a terminal reads U+009B, CSI, as
 * the start of an escape sequence). */
static inline int vt_c1_at(const unsigned char *p) { return p[0] == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f; }

/* Allocates n bytes aligned to 64 bytes, zeroed; returns NULL (and sets e) when out of memory. */
void *vt_alloc(size_t n, vt_err *e);

/* Frees memory from vt_alloc (NULL is fine). */
void vt_free(void *p);

/* The name nearest to a mistyped word among those offered by vt_nearest_try, for a "did you mean" hint. Set word, the
 * rest zero: {.word = w}. */
typedef struct vt_nearest {
    const char *word; /* the word typed */
    const char *best; /* the nearest name offered so far, NULL while none is near */
    int best_len;     /* its length in bytes */
    int score;        /* its distance (lower is nearer) */
} vt_nearest;

/* Offers name (len bytes, not necessarily NUL-terminated): kept when nearer than the best so far. Near means at most
 * a third of the word's length in edits (one at least; an edit inserts, deletes or replaces a letter or swaps two,
 * case ignored), or a name that starts with the word (3 letters at least; ranked after one edit, before two). */
void vt_nearest_try(vt_nearest *s, const char *name, size_t len);

/* Writes "did you mean 'NAME'? " to buf (n bytes), or "" when no name was near; returns buf. */
const char *vt_nearest_hint(const vt_nearest *s, char *buf, size_t n);

/* Multiplies a*b into *out; returns -1 on size_t overflow. */
int vt_mul_overflow(size_t a, size_t b, size_t *out);

#endif
