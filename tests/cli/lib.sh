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
