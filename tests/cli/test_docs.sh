#!/usr/bin/env bash
# The API reference: `make docs` runs Doxygen (docs/Doxyfile) on the public headers with every warning an error; it
# must pass with no warning, document every API function, and fail on a header with an undocumented function.
. "$(dirname "$0")/lib.sh"
command -v doxygen >/dev/null || { bad "doxygen" "not installed (make deps-docs)"; exit 1; }

rm -rf build/docs
make --no-print-directory docs >"$T/docs.log" 2>&1
rc=$?
check "make docs passes" "[ $rc -eq 0 ]" "rc $rc: $(tail -20 "$T/docs.log")"
check "make docs prints no warning" "! grep -qi 'warning' '$T/docs.log'" "$(grep -i warning "$T/docs.log" | head)"
H=build/docs/html/api_8h.html
missing=""
fns=$(sed -n 's/^VITC_API [^(]*[ *]\(vitc_[a-z0-9_]*\)(.*/\1/p' include/vitc/api.h)
for f in $fns; do
    grep -q "$f" "$H" 2>/dev/null || missing="$missing $f"
done
n=$(grep -c '^VITC_API' include/vitc/api.h)
check "every API function ($n) is in the reference" "[ $n -ge 15 ] && [ $(echo $fns | wc -w) -eq $n ] && [ -z '$missing' ]" \
    "missing:$missing; found: $fns"

# Doxygen's own check works: an undocumented function fails the run
printf '/** @file bad.h\n * @brief A header with an undocumented function. */\nint vitc_undocumented(int x);\n' >"$T/bad.h"
(cat docs/Doxyfile; echo "INPUT = $T/bad.h"; echo "OUTPUT_DIRECTORY = $T/out"; echo "STRIP_FROM_PATH = $T") |
    doxygen - >"$T/bad.log" 2>&1
rc=$?
check "an undocumented function fails the docs build" "[ $rc -ne 0 ] && grep -q 'vitc_undocumented' '$T/bad.log'" \
    "rc $rc: $(cat "$T/bad.log")"
