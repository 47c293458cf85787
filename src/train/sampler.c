/* DeiT's repeated-augmentation sampler. */
#include "vitc/sampler.h"

#include <stdlib.h>

#include "vitc/augment.h"

int vt_ra_count(int n, int replicas) { return replicas > 0 && n > 0 ? (int)((long long)n / 256 * 256 / replicas) : 0; }

/* Entry k of the repeated list (each image `repeats` times in a row, then padded with its own start) that output
 * entry i of rank `rank` of `replicas` holds. */
static long long ra_entry(int i, int n, int repeats, int replicas, int rank) {
    const long long j = rank + (long long)i * replicas; /* entry of the repeated, padded list */
    return j < (long long)n * repeats ? j : j - (long long)n * repeats; /* padding repeats the start */
}

int vt_ra_repeat(int i, int n, int repeats, int replicas, int rank) {
    return (int)(ra_entry(i, n, repeats, replicas, rank) % repeats);
}

int vt_ra_sample(int *out, int n, int repeats, int replicas, int rank, vt_rng *rng, vt_err *e) {
    if (n <= 0 || repeats < 1 || replicas < 1 || rank < 0 || rank >= replicas)
        return vt_seterr(e, "repeated-augmentation sampler: bad n %d, repeats %d, replicas %d, rank %d", n, repeats,
                         replicas, rank);
    int *perm = malloc(sizeof(int) * (size_t)n);
    if (!perm) return vt_seterr_code(e, VT_E_NOMEM, "out of memory");
    vt_iota(perm, n);
    vt_shuffle(perm, n, rng);
    const int sel = vt_ra_count(n, replicas);
    for (int i = 0; i < sel; i++) out[i] = perm[ra_entry(i, n, repeats, replicas, rank) / repeats];
    free(perm);
    return sel;
}
