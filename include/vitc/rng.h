/* Deterministic random numbers (xoshiro256** seeded by splitmix64); the state is a plain value. */
#ifndef VITC_RNG_H
#define VITC_RNG_H

#include <stdint.h>

typedef struct vt_rng {
    uint64_t s[4];
} vt_rng;

/* Seeds the generator from one 64-bit seed. */
void vt_rng_seed(vt_rng *r, uint64_t seed);

/* A seed derived from (seed, a, b), e.g. (run seed, epoch, sample index): distinct keys give unrelated streams. */
uint64_t vt_rng_key(uint64_t seed, uint64_t a, uint64_t b);

/* Next 64 random bits. */
uint64_t vt_rng_u64(vt_rng *r);

/* Uniform float in [0, 1). */
float vt_rng_uniform(vt_rng *r);

/* Uniform integer in [0, n) (n > 0). */
uint32_t vt_rng_below(vt_rng *r, uint32_t n);

/* Standard normal sample (Box-Muller). */
float vt_rng_normal(vt_rng *r);

/* Two independent standard normal samples in z (both of Box-Muller's pair: one log, one sqrt, a cos and a sin). */
void vt_rng_normal_pair(vt_rng *r, float z[2]);

/* Gamma(a, 1) sample, a > 0 (Marsaglia-Tsang; a < 1 through Gamma(a + 1)·U^(1/a)); NaN for a <= 0. */
double vt_rng_gamma(vt_rng *r, double a);

/* Beta(a, b) sample as X/(X+Y) with X ~ Gamma(a), Y ~ Gamma(b) (numpy's beta for these parameters is the same law);
 * NaN when a or b is not > 0. */
double vt_rng_beta(vt_rng *r, double a, double b);

#endif
