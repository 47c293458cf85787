/* Data-parallel helpers without mpirun (src/train/dist.c): the one-rank context never starts MPI and its reductions
 * are no-ops; shards partition the padded permutation so that batch i of N ranks x B holds exactly the samples of
 * batch i of one rank x N*B; epoch permutations are keyed by (seed, epoch). torch's DistributedSampler itself is the
 * reference in tests/reference/test_dist.py; the multi-rank paths are tested under mpirun in tests/cli/test_mpi.sh. */
#include <stdlib.h>
#include <string.h>

#include "test.h"
#include "vitc/dist.h"

static int cmp_int(const void *a, const void *b) { return (*(const int *)a > *(const int *)b) - (*(const int *)a < *(const int *)b); }

/* For n samples, `size` ranks and per-rank batch B: rank r's batch i, over all r, is the multiset of padded[(i*B*size)
 * .. ((i+1)*B*size)) where padded[j] = perm[j mod n]. */
static int batches_match(const int *perm, int n, int size, int B) {
    const int per = (n + size - 1) / size;
    int *shard = malloc(sizeof(int) * (size_t)per * (size_t)size), *got = malloc(sizeof(int) * (size_t)B * size),
        *want = malloc(sizeof(int) * (size_t)B * size);
    int ok = shard && got && want;
    for (int r = 0; ok && r < size; r++) ok = vt_dist_shard(perm, n, size, r, shard + (size_t)r * per) == per;
    for (int i = 0; ok && i < per / B; i++) {
        for (int r = 0; r < size; r++) memcpy(got + r * B, shard + (size_t)r * per + (size_t)i * B, sizeof(int) * B);
        for (int j = 0; j < B * size; j++) want[j] = perm[(i * B * size + j) % n];
        qsort(got, (size_t)(B * size), sizeof(int), cmp_int);
        qsort(want, (size_t)(B * size), sizeof(int), cmp_int);
        ok = memcmp(got, want, sizeof(int) * (size_t)(B * size)) == 0;
    }
    free(shard);
    free(got);
    free(want);
    return ok;
}

void test_dist(vt_test *T) {
    vt_err e = {0};
    vt_dist d;
    T_CHECK(T, !vt_dist_launched(), "the unit tests run without mpirun");
    T_CHECK(T, vt_dist_init(&d, &e) == 0 && d.rank == 0 && d.size == 1 && d.local_size == 1 && !d.mpi,
            "one-rank context: rank %d size %d mpi %d (%s)", d.rank, d.size, d.mpi, e.msg);
    double v[2] = {1.5, -2.0};
    T_CHECK(T, vt_dist_sum(&d, v, 2, &e) == 0 && v[0] == 1.5 && v[1] == -2.0, "sum over one rank is the value");
    T_CHECK(T, vt_dist_agree(&d, 0, &e) == 0 && !d.err_shared, "agree on success");
    T_CHECK(T, vt_dist_agree(&d, -1, &e) == -1 && d.err_shared && d.err_reporter, "agree on failure");
    vt_dist_finalize(&d);

    int perm[37], out[40];
    for (int i = 0; i < 37; i++) perm[i] = (i * 11) % 37; /* some order */
    for (int n = 1; n <= 37; n += 4)
        for (int size = 1; size <= 4; size++)
            for (int B = 1; B <= 3; B++)
                T_CHECK(T, batches_match(perm, n, size, B), "n %d, %d ranks, batch %d", n, size, B);
    T_CHECK(T, vt_dist_shard(perm, 37, 2, 2, out) == -1 && vt_dist_shard(perm, 0, 1, 0, out) == -1 &&
                   vt_dist_shard(perm, 5, 0, 0, out) == -1,
            "bad rank, empty list or no ranks refused");

    vt_dist_init(&d, &e);
    int a[100], b[100], c[100];
    T_CHECK(T, vt_dist_epoch_indices(&d, 100, 7, 3, a, &e) == 100 && vt_dist_epoch_indices(&d, 100, 7, 3, b, &e) == 100 &&
                   vt_dist_epoch_indices(&d, 100, 7, 4, c, &e) == 100,
            "epoch indices: %s", e.msg);
    T_CHECK(T, memcmp(a, b, sizeof a) == 0, "same (seed, epoch): same order");
    T_CHECK(T, memcmp(a, c, sizeof a) != 0, "another epoch: another order");
    qsort(a, 100, sizeof(int), cmp_int);
    int isperm = 1;
    for (int i = 0; i < 100; i++) isperm &= a[i] == i;
    T_CHECK(T, isperm, "one rank's epoch is a permutation of the dataset");
}
