#!/usr/bin/env bash
# Runs every test part (unit tests; the same under ASan+UBSan, built twice: vector kernels and scalar code; the three
# libFuzzer targets; the PyTorch reference and CLI tests) and prints one closing line "N passed, N failed"; exits 1
# on any failure. The parts are independent processes and run TEST_JOBS at a time (default: the cores, at most 4),
# the unit binaries first; each part's result is printed when it ends. TEST_JOBS=1 runs them one after another.
# A part still running after TEST_TIMEOUT seconds (default 1200) is stopped with its processes and counts as failed.
set -u
cd "$(dirname "$0")/.."
# OpenMP threads that find no work sleep instead of spinning: on a shared or loaded host spinning threads made small
# graphs 10x slower (results do not depend on it); it also lets the parts share the cores.
export OMP_WAIT_POLICY=PASSIVE
jobs=${TEST_JOBS:-$(nproc)}
[ -n "${TEST_JOBS:-}" ] || [ "$jobs" -le 4 ] || jobs=4
[ "$jobs" -ge 1 ] 2>/dev/null || { echo "TEST_JOBS must be a positive integer, not '$jobs'"; exit 2; }
limit=${TEST_TIMEOUT:-1200}
[ "$limit" -ge 1 ] 2>/dev/null || { echo "TEST_TIMEOUT must be a positive number of seconds, not '$limit'"; exit 2; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

# The parts: name, how its result is read (unit: the binary's closing "N passed, N failed" line; fuzz: make's
# "fuzz TARGET: ok" line; lines: its PASS and FAIL lines), command. The unit binaries first (the longest parts), the
# CLI tests before the reference tests (the longest of those, test_mpi and test_int8, ended last after them).
names=() kinds=() cmds=()
part() { names+=("$1"); kinds+=("$2"); cmds+=("$3"); }
asan="env ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 OMP_NUM_THREADS=2"
part "unit tests under ASan+UBSan, vector kernels (-march=native)" unit "$asan ./build-asan-vec/unit"
part "unit tests under ASan+UBSan, scalar code" unit "$asan ./build-asan/unit"
part "unit tests" unit ./build/unit
# Again on 3 threads (more than this machine's 2 cores): a reduction whose order followed the threads'
# timing (an OpenMP critical section) changed gradients from run to run only from 3 threads on, and the tests'
# bit-identity checks saw it only there.
# The gemm suite runs there too: its alpha-0 products on 3 threads found a oneDNN gemm-driver fault (see gemm_run).
part "unit tests on 3 threads" unit "env OMP_NUM_THREADS=3 ./build/unit"
part "allocation failures (API and trainer) under ASan+UBSan" unit "$asan ./build-asan/alloc_faults"
part "write failures (weights saves, training runs) under ASan+UBSan" unit "$asan ./build-asan/io_faults"
for target in safetensors image model_options; do
    part "fuzz $target" fuzz "make --no-print-directory fuzz-${target//_/-}"
done
for t in tests/cli/test_*.sh; do part "$t" lines "bash $t"; done
for t in tests/reference/test_*.py; do part "$t" lines "/usr/bin/python3 $t"; done
# the reference models' own checks (their counts against the specs, their fast forms against dense ones), which the
# reference tests above build on
for t in swin_ref pvt_ref cswin_ref gmf_ref vit_ref st; do
    part "tests/reference/$t.py (self-test)" lines "/usr/bin/python3 tests/reference/$t.py"
done

pass=0
fail=0

# Prints part i's result (log $dir/i.log, exit status rc, seconds s) and adds its counts.
report() {
    local i=$1 rc=$2 s=$3 log="$dir/$1.log" name=${names[$1]} p=0 f=0 line
    if { [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; } && [ "$s" -ge "$limit" ]; then # timeout(1) stopped it (a kill
        # before the limit, e.g. the OOM killer's, is read as the part's own exit status below)
        echo "== $name ($s s)"
        echo "FAIL $name: still running after $limit s (TEST_TIMEOUT), stopped"
        tail -n 20 "$log"
        fail=$((fail + 1))
        return
    fi
    case ${kinds[$i]} in
        unit)
            echo "== $name ($s s)"
            grep -E '^(FAIL|suite )' "$log" | head -n 60
            line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$log" | tail -n 1)
            if [ -z "$line" ]; then
                f=1; echo "FAIL $name: no summary line (crashed?)"; tail -n 20 "$log"
            else
                p=$(echo "$line" | cut -d' ' -f1); f=$(echo "$line" | cut -d' ' -f3)
                [ "$rc" -eq 0 ] || [ "$f" -ne 0 ] || { f=1; echo "FAIL $name: exit $rc"; }
            fi ;;
        fuzz)
            if [ "$rc" -eq 0 ] && grep -q "^${name}: ok" "$log"; then
                p=1; echo "== $(grep "^${name}: ok" "$log") ($s s)"
            else
                f=1; echo "== $name ($s s)"; echo "FAIL $name"; tail -n 30 "$log"
            fi ;;
        lines)
            p=$(grep -c '^PASS' "$log")
            f=$(grep -c '^FAIL' "$log")
            echo "== $name: $p passed, $f failed ($s s)"
            grep '^FAIL' "$log" | head -n 20
            if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
                f=1; echo "FAIL $name: exit code $rc"; tail -n 20 "$log"
            fi ;;
    esac
    pass=$((pass + p))
    fail=$((fail + f))
}

declare -A part_of # pid -> part
t0=()
next=0
running=0
while [ "$next" -lt "${#names[@]}" ] || [ "$running" -gt 0 ]; do
    while [ "$running" -lt "$jobs" ] && [ "$next" -lt "${#names[@]}" ]; do
        timeout -k 10 "$limit" bash -c "${cmds[$next]}" >"$dir/$next.log" 2>&1 </dev/null &
        part_of[$!]=$next
        t0[$next]=$SECONDS
        next=$((next + 1))
        running=$((running + 1))
    done
    wait -n -p pid
    rc=$?
    running=$((running - 1))
    i=${part_of[$pid]}
    report "$i" "$rc" $((SECONDS - t0[i]))
done

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
