/* Minimal unit-test support: each suite is a function taking a vt_test* and recording checks. */
#ifndef VITC_TEST_H
#define VITC_TEST_H

#include <math.h>
#include <stdio.h>

typedef struct vt_test {
    int pass, fail;
    const char *suite;
} vt_test;

/* Records one check; prints the failing condition with file:line and a formatted detail. */
#define T_CHECK(T, cond, ...)                                                          \
    do {                                                                               \
        if (cond) {                                                                    \
            (T)->pass++;                                                               \
        } else {                                                                       \
            (T)->fail++;                                                               \
            fprintf(stderr, "FAIL [%s] %s:%d: %s: ", (T)->suite, __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                              \
            fprintf(stderr, "\n");                                                     \
        }                                                                              \
    } while (0)

/* The larger of error bound m and error term d (|a - b|, or a relative form of it), where a NaN d gives INFINITY:
 * fmax(m, NaN) is m, so a NaN in the values compared would pass every tolerance unseen. */
static inline double t_worse(double m, double d) { return d == d ? fmax(m, d) : INFINITY; }

#endif
