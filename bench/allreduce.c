/* The cost of averaging gradients alone: MPI_Allreduce (sum, in place) of FLOATS floats in buckets of BUCKET_MIB,
 * each repetition after a barrier so that no rank's wait for a slower one is counted. Rank 0 prints the median.
 *   cc -O2 bench/allreduce.c $(pkg-config --cflags --libs ompi-c) -o build/allreduce
 *   mpirun -np 2 build/allreduce 5717416 4        # DeiT-Ti's parameter count, 4 MiB buckets
 * The trainer's own figure (`Data parallel: ... gradient averaging X ms/step`) also holds the wait for the slower
 * rank, which on a loaded machine can dominate. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

static int cmp(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const long n = argc > 1 ? atol(argv[1]) : 5717416;
    const double mib = argc > 2 ? atof(argv[2]) : 4.0;
    const int reps = argc > 3 ? atoi(argv[3]) : 20;
    const long bucket = (long)(mib * 1048576.0 / sizeof(float));
    float *g = malloc(sizeof(float) * (size_t)n);
    double *t = malloc(sizeof(double) * (size_t)reps);
    if (n < 1 || bucket < 1 || reps < 1 || !g || !t) MPI_Abort(MPI_COMM_WORLD, 2);
    for (long i = 0; i < n; i++) g[i] = (float)(i % 97) * 1e-3f;
    for (int r = -2; r < reps; r++) { /* two warm-up repetitions */
        MPI_Barrier(MPI_COMM_WORLD);
        const double t0 = MPI_Wtime();
        for (long off = 0; off < n; off += bucket)
            MPI_Allreduce(MPI_IN_PLACE, g + off, (int)(n - off < bucket ? n - off : bucket), MPI_FLOAT, MPI_SUM,
                          MPI_COMM_WORLD);
        if (r >= 0) t[r] = MPI_Wtime() - t0;
    }
    qsort(t, (size_t)reps, sizeof *t, cmp);
    if (rank == 0)
        printf("allreduce of %ld floats (%.1f MiB) in %.1f MiB buckets over %d ranks: median %.2f ms, best %.2f ms\n", n,
               n * 4.0 / 1048576.0, mib, size, 1e3 * t[reps / 2], 1e3 * t[0]);
    free(g);
    free(t);
    MPI_Finalize();
    return 0;
}
