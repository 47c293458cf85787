/* LD_PRELOAD shim for the benchmark anchors only (bench/benchenv.py builds it; never linked into vitc): oneMKL picks
 * its kernels after asking whether the CPU is Intel's, and on other vendors' CPUs takes a slower code path (PyPI
 * torch 2.15's MKL 2024.2 on an AMD EPYC Zen 5, 2 threads: sgemm 1024^3 at 176 GFLOP/s, 452 with this shim). Answering
 * "Intel" lets it choose by the CPU's features, as it does on Intel; the benchmarks then time the anchor at its best. */

/* MKL's vendor check: nonzero for "GenuineIntel". */
int mkl_serv_intel_cpu_true(void);
int mkl_serv_intel_cpu_true(void) { return 1; }
