/* The order in which a training epoch visits the images: DeiT's repeated-augmentation sampler (RASampler). */
#ifndef VITC_SAMPLER_H
#define VITC_SAMPLER_H

#include "vitc/error.h"
#include "vitc/rng.h"

/* Images one rank visits per epoch under DeiT's RASampler: ⌊⌊n/256⌋·256 / replicas⌋ (0 when n < 256). */
int vt_ra_count(int n, int replicas);

/* DeiT's RASampler (samplers.py) for rank `rank` of `replicas`: a random permutation of [0, n) (Fisher-Yates from
 * rng, in place of torch.randperm), each index repeated `repeats` times in a row, padded with its own start to a
 * multiple of replicas, every replicas-th entry from `rank` on, cut to vt_ra_count(n, replicas) entries, written to
 * out (room for that many). Returns that count, or -1 (error set) for bad arguments or out of memory. */
int vt_ra_sample(int *out, int n, int repeats, int replicas, int rank, vt_rng *rng, vt_err *e);

/* Which copy (0 .. repeats-1) of its image entry i of vt_ra_sample's output (same n, repeats, replicas, rank) is: the
 * trainer keys each copy's augmentation by it, so the copies of an image get different draws, as in DeiT. */
int vt_ra_repeat(int i, int n, int repeats, int replicas, int rank);

#endif
