/* The CPUs this process may run on, for thread-count defaults (the CLI's --threads, the input pipeline's workers, the
 * API's thread clamp). */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#include <sched.h>
#include <unistd.h>

#include "vitc/graph.h"

int vt_cpus_usable(void) {
    const long online = sysconf(_SC_NPROCESSORS_ONLN);
    const int n_online = online < 1 ? 1 : online > 1 << 20 ? 1 << 20 : (int)online;
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) != 0) return n_online;
    const int mine = CPU_COUNT(&set);
    return mine > 0 && mine < n_online ? mine : n_online;
}
