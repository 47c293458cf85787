#include "vitc/rng.h"

#include <float.h>
#include <math.h>

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

void vt_rng_seed(vt_rng *r, uint64_t seed) {
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&seed);
}

uint64_t vt_rng_key(uint64_t seed, uint64_t a, uint64_t b) {
    uint64_t x = seed;
    uint64_t k = splitmix64(&x) ^ a;
    k = splitmix64(&k) ^ b;
    return splitmix64(&k);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t vt_rng_u64(vt_rng *r) {
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

float vt_rng_uniform(vt_rng *r) { return (float)(vt_rng_u64(r) >> 40) * (1.0f / 16777216.0f); }

uint32_t vt_rng_below(vt_rng *r, uint32_t n) { return (uint32_t)(((vt_rng_u64(r) >> 32) * (uint64_t)n) >> 32); }

/* Box-Muller's radius sqrt(-2 ln u1), u1 in (0, 1], and angle 2π·u2, u2 in [0, 1), from two draws of r. */
static void box_muller(vt_rng *r, double *rad, double *th) {
    const double u1 = ((double)(vt_rng_u64(r) >> 11) + 1.0) * (1.0 / 9007199254740993.0);
    const double u2 = (double)(vt_rng_u64(r) >> 11) * (1.0 / 9007199254740992.0);
    *rad = sqrt(-2.0 * log(u1));
    *th = 2.0 * 3.14159265358979323846 * u2;
}

float vt_rng_normal(vt_rng *r) {
    double rad, th;
    box_muller(r, &rad, &th);
    return (float)(rad * cos(th));
}

void vt_rng_normal_pair(vt_rng *r, float z[2]) {
    double rad, th;
    box_muller(r, &rad, &th);
    z[0] = (float)(rad * cos(th));
    z[1] = (float)(rad * sin(th));
}

/* Uniform double in (0, 1] with 53 random bits. */
static double unit_open0(vt_rng *r) { return ((double)(vt_rng_u64(r) >> 11) + 1.0) * (1.0 / 9007199254740992.0); }

/* Standard normal in double precision (Box-Muller, one of the pair). */
static double normal_d(vt_rng *r) {
    double u1 = unit_open0(r), u2 = unit_open0(r);
    return sqrt(-2.0 * log(u1)) * cos(2.0 * 3.14159265358979323846 * u2);
}

/* Gamma(a) for a >= 1 (Marsaglia & Tsang, 2000). */
static double gamma_ge1(vt_rng *r, double a) {
    const double d = a - 1.0 / 3.0, c = 1.0 / sqrt(9.0 * d);
    for (;;) {
        double x = normal_d(r), v = 1.0 + c * x;
        if (v <= 0.0) continue;
        v = v * v * v;
        double u = unit_open0(r);
        if (u < 1.0 - 0.0331 * x * x * x * x || log(u) < 0.5 * x * x + d * (1.0 - v + log(v))) return d * v;
    }
}

/* A Gamma(a) draw and its log in *lg, kept where the draw underflows: below shape 1, Gamma(a + 1)·U^(1/a) is 0 in
 * double for U < 10^(-308·a) (half the draws at a = 1e-3, all of them at 1e-300) */
static double gamma_log(vt_rng *r, double a, double *lg) {
    if (!(a > 0.0)) return *lg = NAN;
    if (a >= 1.0) {
        const double g = gamma_ge1(r, a);
        *lg = log(g);
        return g;
    }
    const double g = gamma_ge1(r, a + 1.0), u = unit_open0(r);
    *lg = log(g) + log(u) / a;
    return g * pow(u, 1.0 / a);
}

double vt_rng_gamma(vt_rng *r, double a) {
    double lg;
    return gamma_log(r, a, &lg);
}

double vt_rng_beta(vt_rng *r, double a, double b) {
    double lx, ly;
    const double x = gamma_log(r, a, &lx), y = gamma_log(r, b, &ly);
    if (x >= DBL_MIN && y >= DBL_MIN) return x / (x + y);
    /* a draw that underflowed: x / (x + y) from the logs (was 0.5 when both did: full mixing where Beta(a, a) of a
     * small a is almost always 0 or 1, as numpy's, timm's, draws it) */
    return isnan(lx) || isnan(ly) ? NAN : 1.0 / (1.0 + exp(ly - lx)); /* NaN: a or b not > 0, as vt_rng_gamma */
}
