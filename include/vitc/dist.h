/* Data-parallel training over OpenMPI ranks (`mpirun -np N vitc train ...`): the launch context, each rank's shard
 * of an epoch (torch DistributedSampler semantics), gradient averaging in buckets (overlapped with backward), small
 * reductions and broadcasts. Without mpirun every call is a no-op on a one-rank context and MPI is never initialised. */
#ifndef VITC_DIST_H
#define VITC_DIST_H

#include <stddef.h>
#include <stdint.h>

#include "vitc/error.h"
#include "vitc/graph.h"
#include "vitc/optim.h"
#include "vitc/tensor.h"

/* The ranks of one run (a value owned by the caller; all MPI state lives here or in MPI itself). */
typedef struct vt_dist {
    int rank, size;              /* this process's rank and the number of ranks (0 and 1 without mpirun) */
    int local_rank, local_size;  /* the same among the ranks on this node */
    int cpu_sharers;             /* the node's ranks whose CPU affinity overlaps this one's, this one included (1
                                    without mpirun): they compete for its cores */
    int cpu_share_lead;          /* 1: no lower rank of the node is among them (the one to say so) */
    int mpi;                     /* 1: MPI is in use (launched by mpirun) */
    int mpi_owned;               /* 1: vt_dist_init started MPI, which vt_dist_finalize ends */
    int overlap;                 /* 1: each bucket's allreduce starts during backward when its gradients are final */
    size_t bucket_bytes;         /* gradient bucket size (vt_dist_init: 4 MiB) */
    double comm_s;               /* seconds the trainer spent averaging gradients outside the backward kernels */
    int64_t comm_steps;          /* steps counted in comm_s */
    int err_shared;              /* set by vt_dist_agree when some rank failed: every rank knows and stops */
    int err_reporter;            /* ... and this rank is the lowest failing one, whose message is worth printing */
} vt_dist;

/* 1 when this process was started by mpirun/prterun (OMPI_COMM_WORLD_SIZE or PMIX_RANK in the environment). */
int vt_dist_launched(void);

/* The launch as the environment tells it before MPI starts (OpenMPI's OMPI_COMM_WORLD_* variables): this process's
 * rank, its rank among the node's ranks and their count (NULLs allowed); returns the world size, 1 without mpirun. */
int vt_dist_env(int *rank, int *local_rank, int *local_size);

/* Fills d: under mpirun initialises MPI (MPI_Init_thread, funneled; a library providing less is refused) and reads
 * the rank, the world and the node's rank count, and which of the node's ranks share this one's CPUs; otherwise a
 * one-rank context without MPI. Overlap on, 4 MiB buckets. */
int vt_dist_init(vt_dist *d, vt_err *e);

/* Ends MPI when vt_dist_init started it (every rank must call it); a no-op otherwise. */
void vt_dist_finalize(vt_dist *d);

/* Stops every rank of the run with exit code `code` (MPI_Abort) after this rank failed on its own (the others may wait
 * in a collective forever otherwise); returns without MPI. For the CLI: the library itself never calls it. */
void vt_dist_abort(const vt_dist *d, int code);

/* Rank `rank`'s shard of perm[0..n) among `size` ranks, as torch's DistributedSampler: the list padded by wrapping
 * to a multiple of size, then every size-th element from rank: out[k] = perm[(rank + size*k) mod n] for k in
 * [0, ceil(n/size)). Returns the shard length (-1 on bad arguments). */
int vt_dist_shard(const int *perm, int n, int size, int rank, int *out);

/* This rank's sample indices of epoch `epoch`: a permutation of [0, n) drawn from (seed, epoch) alone (equal on every
 * rank and in a resumed run), sharded by vt_dist_shard. out holds ceil(n/size) ints; returns the count or -1. */
int vt_dist_epoch_indices(const vt_dist *d, int n, uint64_t seed, int64_t epoch, int *out, vt_err *e);

/* Sums v[0..n) over the ranks, in place (every rank gets the sums). */
int vt_dist_sum(const vt_dist *d, double *v, int n, vt_err *e);

/* vt_dist_sum as a graph's allsum (ctx: the vt_dist) for synchronised BatchNorm; a failure stops every rank. */
void vt_dist_allsum(void *ctx, double *v, int n);

/* Copies rank 0's parameters and buffers of P, the optimizer's moments and step (opt may be NULL) and v[0..nv) to
 * every rank, so that all ranks start equal. */
int vt_dist_broadcast(const vt_dist *d, vt_params *P, vt_adamw *opt, int64_t *v, int nv, vt_err *e);

/* Copies rank 0's v[0..n) to every rank. */
int vt_dist_bcast_i64(const vt_dist *d, int64_t *v, int n, vt_err *e);

/* Copies rank 0's bytes (*buf, *len; NULL and 0 allowed) to every rank: the others' *buf becomes a malloc'd copy (NULL
 * when *len is 0) that the caller frees, and what they held is ignored. */
int vt_dist_bcast_bytes(const vt_dist *d, char **buf, size_t *len, vt_err *e);

/* Collective check after a step that may fail on some ranks only: returns 0 when rc == 0 on every rank; else -1 on
 * every rank with err_shared set; a rank whose rc was 0 gets a message naming the lowest failing rank. Once set, later
 * checks keep the first failure's reporter (every rank fails them alike). */
int vt_dist_agree(vt_dist *d, int rc, vt_err *e);

/* Gradient averaging of one train graph's parameters. */
typedef struct vt_dist_grads vt_dist_grads;

/* Prepares averaging of the gradients of every trainable parameter of g (finalized) in buckets of d->bucket_bytes,
 * ordered as backward finishes them; with d->overlap, installs g's backward hook that starts a bucket's
 * MPI_Iallreduce as soon as the last node writing its gradients has run. NULL (error set) on failure; a one-rank d
 * gives an object whose average is a no-op. */
vt_dist_grads *vt_dist_grads_new(vt_dist *d, vt_graph *g, vt_err *e);

/* After vt_graph_backward: completes the allreduce of every bucket (blocking MPI_Allreduce per bucket without
 * overlap) and stores the mean gradient (sum / size) in each parameter; adds its time to d->comm_s. */
int vt_dist_grads_average(vt_dist_grads *b, vt_err *e);

/* hold 1: the next backward passes start no allreduce (micro-batches before the last of an accumulated step); hold 0
 * puts the overlapping hook back. */
void vt_dist_grads_hold(vt_dist_grads *b, int hold);

/* Removes the hook from the graph and frees b (NULL is fine). */
void vt_dist_grads_free(vt_dist_grads *b);

#endif
