#!/usr/bin/env bash
# Lower-precision GEMM on this machine (issue 13 §4): builds bench/lowp_gemm.c and prints, for DeiT-S's and the demo
# ViT's linear shapes, OpenBLAS and oneDNN fp32 against oneDNN bf16 and int8 matmul (GFLOP/s, ratios), with the CPU.
#     bash bench/lowp_gemm.sh [REPS]      (default 3; alternate nothing else on the machine while it runs)
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p build
cc -std=c11 -Wall -Wextra -Werror -O2 -fopenmp -I/usr/include/x86_64-linux-gnu/openblas-openmp bench/lowp_gemm.c \
    -L/usr/lib/x86_64-linux-gnu/openblas-openmp -lopenblas -ldnnl -o build/lowp_gemm
echo "# $(date -u +%F), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) threads;" \
     "flags: $(grep -m1 -o -w -E 'avx512_bf16|avx512_vnni|amx_bf16' /proc/cpuinfo | sort -u | tr '\n' ' ')"
./build/lowp_gemm "${1:-3}"
