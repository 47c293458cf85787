/* Driver for test_dist.py: prints vt_dist_shard of the identity permutation of [0, n) for every rank of `size`,
 * one line per rank ("rank: i i i ..."). Usage: dist_driver N SIZE */
#include <stdio.h>
#include <stdlib.h>

#include "vitc/dist.h"

int main(int argc, char **argv) {
    if (argc != 3) return 2;
    const int n = atoi(argv[1]), size = atoi(argv[2]);
    if (n < 1 || size < 1) return 2;
    int *perm = malloc(sizeof(int) * (size_t)n), *out = malloc(sizeof(int) * (size_t)(n + size));
    if (!perm || !out) return 1;
    for (int i = 0; i < n; i++) perm[i] = i;
    for (int r = 0; r < size; r++) {
        const int k = vt_dist_shard(perm, n, size, r, out);
        printf("%d:", r);
        for (int i = 0; i < k; i++) printf(" %d", out[i]);
        printf("\n");
    }
    free(perm);
    free(out);
    return 0;
}
