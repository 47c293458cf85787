#!/usr/bin/env bash
# Runs every test part (unit tests, the same under ASan+UBSan, the safetensors fuzzer, the PyTorch reference
# and CLI tests) and prints one closing line "N passed, N failed"; exits 1 on any failure.
set -u
cd "$(dirname "$0")/.."
# OpenMP threads that find no work sleep instead of spinning: on a shared or loaded host spinning threads made small
# graphs 10x slower (results do not depend on it)
export OMP_WAIT_POLICY=PASSIVE
pass=0
fail=0
log=$(mktemp)
trap 'rm -f "$log"' EXIT

# Adds the counts of a unit-test binary's closing "N passed, N failed" line (a missing line is a failure).
count_unit() {
    local line
    line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$log" | tail -n 1)
    if [ -z "$line" ]; then
        fail=$((fail + 1))
        echo "FAIL $1: no summary line (crashed?)"
        tail -n 20 "$log"
        return
    fi
    pass=$((pass + $(echo "$line" | cut -d' ' -f1)))
    fail=$((fail + $(echo "$line" | cut -d' ' -f3)))
    [ "$2" -eq 0 ] || [ "$(echo "$line" | cut -d' ' -f3)" != 0 ] || { fail=$((fail + 1)); echo "FAIL $1: exit $2"; }
}

run_part() { # name, command...
    local name=$1
    shift
    echo "== $name"
    local t0=$SECONDS
    "$@" >"$log" 2>&1
    local rc=$?
    grep -E '^(FAIL|suite )' "$log" | head -n 60
    echo "   ($((SECONDS - t0)) s)"
    return $rc
}

run_part "unit tests" ./build/unit; count_unit unit $?
run_part "unit tests under ASan+UBSan" env ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    OMP_NUM_THREADS=2 ./build-asan/unit
count_unit asan $?

echo "== fuzz (safetensors parser, image decoders + preprocessing)"
make --no-print-directory fuzz >"$log" 2>&1
for target in safetensors image; do
    if grep -q "^fuzz $target: ok" "$log"; then
        pass=$((pass + 1)); grep "^fuzz $target:" "$log"
    else
        fail=$((fail + 1)); echo "FAIL fuzz $target"; tail -n 30 "$log"
    fi
done

for t in tests/reference/test_*.py tests/cli/test_*.sh; do
    [ -e "$t" ] || continue
    t0=$SECONDS
    case "$t" in
        *.py) /usr/bin/python3 "$t" >"$log" 2>&1 ;;
        *.sh) bash "$t" >"$log" 2>&1 ;;
    esac
    rc=$?
    p=$(grep -c '^PASS' "$log")
    f=$(grep -c '^FAIL' "$log")
    echo "== $t: $p passed, $f failed ($((SECONDS - t0)) s)"
    grep '^FAIL' "$log" | head -n 20
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
        f=1; echo "FAIL $t: exit code $rc"; tail -n 20 "$log"
    fi
    pass=$((pass + p))
    fail=$((fail + f))
done

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
