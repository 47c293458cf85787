#!/usr/bin/env bash
# int8 against fp32 linear layers on this machine (bench/int8_linear.c): builds vitc's library and the benchmark,
# prints milliseconds per layer and their ratio. Usage: bash bench/int8_linear.sh [ROUNDS] (default 3).
set -euo pipefail
cd "$(dirname "$0")/.."
make --no-print-directory -s build/libvitc.a
# shellcheck disable=SC2046
cc -std=c11 -Wall -Wextra -Werror -D_POSIX_C_SOURCE=200809L -O2 -fopenmp -Iinclude bench/int8_linear.c build/libvitc.a \
    $(make -s --no-print-directory link-flags) -o build/int8_linear
./build/int8_linear "${1:-3}"
