# Shared by the CLI tests (sourced, not run): the repository root as working folder, a temporary folder $T removed
# on exit, and the report helpers: ok NAME, bad NAME DETAIL, check NAME CONDITION [DETAIL] (PASS/FAIL lines, counted
# by tests/run_all.sh).
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
ok() { echo "PASS $1"; }
bad() { echo "FAIL $1: $2"; }
check() { if eval "$2"; then ok "$1"; else bad "$1" "${3:-$2}"; fi; }
# make_test_imagefolder: sets F to the test ImageFolder of Fashion-MNIST (2,000 train / 500 val images as PNG and
# JPEG, tools/make_imagefolder.py), made once under build/ and reused (under a lock: tests run side by side), and
# checks it exists.
make_test_imagefolder() {
    F=build/test-folder
    mkdir -p build
    (
        flock 9
        if [ ! -e "$F/.done" ]; then
            rm -rf "$F"
            /usr/bin/python3 tools/make_imagefolder.py fmnist "$F" --train 2000 --val 500 >"$T/mk.log" 2>&1 &&
                touch "$F/.done"
        fi
    ) 9>build/test-folder.lock
    check "the test ImageFolder exists (tools/make_imagefolder.py)" "[ -e '$F/.done' ]" "$(tail -3 "$T/mk.log" 2>/dev/null)"
}
# use_mpirun: sets MPI to a 2-rank mpirun for this small machine (oversubscribed, unbound; root allowed, as CI runs
# as root; no cross-memory-attach, which containers often forbid).
use_mpirun() {
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 \
        OMPI_MCA_btl_vader_single_copy_mechanism=none
    MPI="mpirun --oversubscribe --bind-to none -np 2"
}
