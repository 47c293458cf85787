/* The CPUs this process may run on, for thread-count defaults (the CLI's --threads, the input pipeline's workers, the
 * API's thread clamp). */
#define _GNU_SOURCE /* sched_getaffinity, CPU_ALLOC */
#include <errno.h>
#include <omp.h>
#include <sched.h>
#include <stdlib.h>
#include <unistd.h>

#include "vitc/graph.h"

static int cmp_int(const void *a, const void *b) {
    const int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

/* The distinct CPUs of OpenMP's place list (OMP_PLACES, or the places OMP_PROC_BIND makes), 0 without one. With
 * binding, libgomp pins the initial thread to the first place when the library loads, so that thread's own affinity
 * (sched_getaffinity) is one place while the team runs on all of them: OMP_PROC_BIND=true on 2 cores made it 1. */
static int place_cpus(void) {
    const int places = omp_get_num_places();
    int total = 0;
    for (int p = 0; p < places; p++) total += omp_get_place_num_procs(p);
    if (places <= 0 || total <= 0) return 0;
    int *ids = malloc(sizeof *ids * (size_t)total);
    if (!ids) return 0;
    for (int p = 0, k = 0; p < places; k += omp_get_place_num_procs(p), p++) omp_get_place_proc_ids(p, ids + k);
    qsort(ids, (size_t)total, sizeof *ids, cmp_int);
    int n = 0;
    for (int i = 0; i < total; i++) n += i == 0 || ids[i] != ids[i - 1];
    free(ids);
    return n;
}

unsigned char *vt_cpus_mask(size_t *bytes) {
    const long conf = sysconf(_SC_NPROCESSORS_CONF);
    *bytes = 0;
    for (int n = conf > 1024 ? (int)(conf < 1 << 20 ? conf : 1 << 20) : 1024; n <= 1 << 20; n *= 2) {
        cpu_set_t *set = CPU_ALLOC(n);
        if (!set) return NULL;
        const size_t size = CPU_ALLOC_SIZE(n);
        CPU_ZERO_S(size, set);
        if (sched_getaffinity(0, size, set) == 0) {
            *bytes = size;
            return (unsigned char *)set;
        }
        CPU_FREE(set);
        if (errno != EINVAL) return NULL;
    }
    return NULL;
}

/* The CPUs in the calling thread's affinity mask, 0 where it cannot be read. */
static int thread_cpus(void) {
    size_t bytes;
    unsigned char *m = vt_cpus_mask(&bytes);
    int n = 0;
    for (size_t i = 0; m && i < bytes; i++) n += __builtin_popcount(m[i]);
    free(m);
    return n;
}

int vt_cpus_usable(void) {
    const long online = sysconf(_SC_NPROCESSORS_ONLN);
    const int n_online = online < 1 ? 1 : online > 1 << 20 ? 1 << 20 : (int)online;
    int mine = thread_cpus();
    if (mine <= 0) return n_online;
    const int placed = place_cpus(); /* the places are made from the process's mask before that binding */
    if (placed > mine) mine = placed;
    return mine > 0 && mine < n_online ? mine : n_online;
}
