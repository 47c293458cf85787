#!/usr/bin/env bash
# libvitc as an installed library: `make install PREFIX=...` into a folder inside build/ (the shared library with its
# SONAME and links, the static archive, the public headers, vitc.pc), only `vitc_` symbols exported (shared and
# static; no OpenMPI, the trainer's, among its dependencies), examples/classify.c compiled against the installed library through pkg-config, linked shared and static,
# printing exactly what `vitc predict` prints for the same model, weights and images; DESTDIR; `make uninstall`.
. "$(dirname "$0")/lib.sh"
V=./vitc
PY=/usr/bin/python3
CC=${CC:-cc}
mkdir -p build
P=$(mktemp -d "$PWD/build/install.XXXXXX")
CLEANUP+=("$P")

make --no-print-directory install PREFIX="$P" >"$T/install.log" 2>&1
rc=$?
check "make install PREFIX=..." "[ $rc -eq 0 ]" "rc $rc: $(tail -5 "$T/install.log")"
L=$P/lib
# the version as the header defines it (VITC_VERSION_*), the one place it lives
VER=$(make --no-print-directory -s print-version)
MAJ=${VER%%.*}
check "the header's version has three numbers" "echo '$VER' | grep -qx '[0-9][0-9]*\.[0-9][0-9]*\.[0-9][0-9]*'" "'$VER'"
check "installed files" "[ -f '$L/libvitc.so.$VER' ] && [ -L '$L/libvitc.so.$MAJ' ] && [ -L '$L/libvitc.so' ] && \
    [ \"\$(readlink '$L/libvitc.so.$MAJ')\" = libvitc.so.$VER ] && [ \"\$(readlink '$L/libvitc.so')\" = libvitc.so.$MAJ ] && \
    [ -f '$L/libvitc.a' ] && [ -f '$P/include/vitc/vitc.h' ] && [ -f '$P/include/vitc/api.h' ] && \
    [ -f '$L/pkgconfig/vitc.pc' ] && [ -x '$P/bin/vitc' ]" "$(find "$P" | sort)"
soname=$(readelf -d "$L/libvitc.so.$VER" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')
check "SONAME libvitc.so.$MAJ" "[ '$soname' = libvitc.so.$MAJ ]" "soname '$soname'"
readelf -d "$L/libvitc.so.$VER" | sed -n 's/.*Shared library: \[\(.*\)\]/\1/p' >"$T/needed.txt"
check "the library (inference) needs no OpenMPI, which only training uses" \
    "grep -q libdnnl '$T/needed.txt' && ! grep -q libmpi '$T/needed.txt' && ! pkg-config --static --libs vitc 2>/dev/null | \
    grep -q -- -lmpi" "$(cat "$T/needed.txt")"

# the symbols without their versions (nm prints name@@VERSION), the version node itself (type A) left out
nm -D --defined-only "$L/libvitc.so.$VER" | awk '$2 != "A" {sub(/@.*/, "", $NF); print $NF}' >"$T/dyn.txt"
check "shared library exports the API only (vitc_*)" \
    "[ \$(grep -c . '$T/dyn.txt') -ge 10 ] && ! grep -qv '^vitc_' '$T/dyn.txt' && grep -qx vitc_open '$T/dyn.txt'" \
    "$(grep -v '^vitc_' "$T/dyn.txt" | head -5)"
objdump -T "$L/libvitc.so.$VER" | awk '$4 == ".text" {print $(NF - 1)}' | sort -u >"$T/vers.txt"
check "every exported function carries the symbol version VITC_0.6 (src/api/libvitc.map)" \
    "[ \"\$(cat '$T/vers.txt')\" = VITC_0.6 ]" "$(cat "$T/vers.txt")"
nm --defined-only --extern-only "$L/libvitc.a" 2>/dev/null | awk 'NF == 3 {print $3}' >"$T/stat.txt"
check "static archive exposes the API only (vitc_*)" \
    "grep -qx vitc_open '$T/stat.txt' && ! grep -qv '^vitc_' '$T/stat.txt'" "$(grep -v '^vitc_' "$T/stat.txt" | head -5)"

export PKG_CONFIG_PATH=$L/pkgconfig
check "pkg-config: version, flags, static dependencies" \
    "[ \"\$(pkg-config --modversion vitc)\" = $VER ] && pkg-config --cflags vitc | grep -q -- '-I$P/include' && \
    pkg-config --libs vitc | grep -q -- '-L$L -lvitc' && pkg-config --static --libs vitc | grep -q -- '-ldnnl' && \
    pkg-config --static --libs vitc | grep -q -- '-lopenblas' && pkg-config --static --libs vitc | grep -q -- '-fopenmp'" \
    "$(pkg-config --cflags --static --libs vitc 2>&1)"

check "examples/classify.c has at most 80 lines and includes only <vitc/vitc.h> of vitc" \
    "[ \$(wc -l < examples/classify.c) -le 80 ] && [ \"\$(grep '#include' examples/classify.c | grep -c vitc)\" = 1 ] && \
    grep -q '#include <vitc/vitc.h>' examples/classify.c"
# shellcheck disable=SC2046
$CC -std=c11 -Wall -Wextra -Werror examples/classify.c -o "$T/classify" $(pkg-config --cflags --libs vitc) \
    >"$T/cc.log" 2>&1
rc=$?
check "example builds against the installed shared library" "[ $rc -eq 0 ]" "$(cat "$T/cc.log")"
# shellcheck disable=SC2046
$CC -std=c11 -Wall -Wextra -Werror examples/classify.c -o "$T/classify_static" $(pkg-config --cflags vitc) \
    $(pkg-config --static --libs vitc | sed 's/-lvitc/-l:libvitc.a/') >"$T/ccs.log" 2>&1
rc=$?
check "example builds against the installed static library" "[ $rc -eq 0 ]" "$(cat "$T/ccs.log")"
LD_LIBRARY_PATH=$L ldd "$T/classify" >"$T/ldd.txt" 2>&1
check "shared example loads libvitc.so.$MAJ from PREFIX" "grep -q 'libvitc.so.$MAJ => $L/libvitc.so.$MAJ' '$T/ldd.txt'" \
    "$(cat "$T/ldd.txt")"
check "shared example binds vitc_open at its version" \
    "objdump -T '$T/classify' | grep -Eq '[(]VITC_0[.]6[)] +vitc_open\$'" \
    "$(objdump -T "$T/classify" | grep vitc_ | head -3)"
check "static example does not need libvitc.so" "[ -x '$T/classify_static' ] && ! ldd '$T/classify_static' | grep -q libvitc"

# internal symbols are hidden: a program calling one does not link against the shared library
printf '#include <vitc/vitc.h>\nint vt_model_count(void);\nint main(void) { return vt_model_count() > 0 && vitc_model_count() > 0 ? 0 : 1; }\n' \
    >"$T/internal.c"
# shellcheck disable=SC2046
if $CC "$T/internal.c" -o "$T/internal" $(pkg-config --cflags --libs vitc) >"$T/int.log" 2>&1; then
    bad "an internal function is not reachable through libvitc.so" "linked"
else
    check "an internal function is not reachable through libvitc.so" "grep -q 'vt_model_count' '$T/int.log'" \
        "$(cat "$T/int.log")"
fi

# the headers in a C++ program (the extern "C" guards): it builds with warnings as errors, links, and reads the version
CXX=${CXX:-c++}
printf '#include <vitc/vitc.h>\n#include <cstdio>\nint main() {\n    vitc_options o;\n    vitc_options_init(&o);\n    std::printf("%%s %%d\\n", vitc_version(), vitc_model_count() > 10);\n    return 0;\n}\n' \
    >"$T/cxx.cc"
# shellcheck disable=SC2046
$CXX -std=c++11 -Wall -Wextra -Werror -pedantic "$T/cxx.cc" -o "$T/cxx" $(pkg-config --cflags --libs vitc) \
    >"$T/cxx.log" 2>&1
rc=$?
out=$(LD_LIBRARY_PATH=$L "$T/cxx" 2>&1)
check "a C++ program includes <vitc/vitc.h>, links the shared library and calls it" \
    "[ $rc -eq 0 ] && [ '$out' = '$VER 1' ]" "rc $rc: $(head -5 "$T/cxx.log") out '$out'"

# the same images through the example (shared and static) and through vitc predict, for a 1- and a 3-channel model
$PY - "$T" <<'EOF'
import sys
from PIL import Image
import numpy as np
r = np.random.default_rng(3)
for i, (h, w) in enumerate([(40, 33), (90, 120), (28, 28)]):
    Image.fromarray(r.integers(0, 255, (h, w, 3), dtype=np.uint8)).save(f"{sys.argv[1]}/im{i}.png")
Image.fromarray(r.integers(0, 255, (70, 50, 3), dtype=np.uint8)).save(f"{sys.argv[1]}/im3.jpg", quality=90)
EOF
IMGS="$T/im0.png $T/im1.png $T/im2.png $T/im3.jpg"
for m in vit_fmnist_tiny groupmixformer_test; do
    $V init $m -o "$T/$m.safetensors" --seed 5 >/dev/null 2>&1
    $V predict $m -w "$T/$m.safetensors" $IMGS >"$T/cli.txt" 2>"$T/cli.err"
    LD_LIBRARY_PATH=$L "$T/classify" $m "$T/$m.safetensors" $IMGS >"$T/ex.txt" 2>"$T/ex.err"
    rc=$?
    check "$m: example (shared) prints what vitc predict prints" \
        "[ $rc -eq 0 ] && [ -s '$T/cli.txt' ] && [ \$(grep -c '^  1\\. class' '$T/ex.txt') -eq 4 ] && cmp -s '$T/cli.txt' '$T/ex.txt'" \
        "rc $rc; $(diff "$T/cli.txt" "$T/ex.txt" | head -10) $(cat "$T/ex.err")"
    "$T/classify_static" $m "$T/$m.safetensors" $IMGS >"$T/exs.txt" 2>"$T/exs.err"
    rc=$?
    check "$m: example (static) prints what vitc predict prints" "[ $rc -eq 0 ] && cmp -s '$T/cli.txt' '$T/exs.txt'" \
        "rc $rc; $(diff "$T/cli.txt" "$T/exs.txt" | head -10) $(cat "$T/exs.err")"
done
# class names beside the weights with non-ASCII characters: both pad them to 12 characters, not UTF-8 bytes
$PY -c 'import json, sys; json.dump({str(i): f"cl\u00e9{i}" for i in range(10)}, open(sys.argv[1], "w"), ensure_ascii=False)' \
    "$T/vit_fmnist_tiny.classes.json"
$V predict vit_fmnist_tiny -w "$T/vit_fmnist_tiny.safetensors" "$T/im0.png" >"$T/cli.txt" 2>"$T/cli.err"
LD_LIBRARY_PATH=$L "$T/classify" vit_fmnist_tiny "$T/vit_fmnist_tiny.safetensors" "$T/im0.png" >"$T/ex.txt" 2>"$T/ex.err"
rc=$?
check "example: non-ASCII class names beside the weights, printed as vitc predict prints them" \
    "[ $rc -eq 0 ] && grep -q 'clé' '$T/ex.txt' && cmp -s '$T/cli.txt' '$T/ex.txt'" \
    "rc $rc; $(diff "$T/cli.txt" "$T/ex.txt" | head -6) $(cat "$T/ex.err")"
rm -f "$T/vit_fmnist_tiny.classes.json"
head -c 300 /dev/urandom >"$T/noise.png"
LD_LIBRARY_PATH=$L "$T/classify" vit_fmnist_tiny "$T/vit_fmnist_tiny.safetensors" "$T/im0.png" "$T/noise.png" \
    >"$T/ex.txt" 2>"$T/ex.err"
rc=$?
check "example: a corrupt image is an error naming it, the others are classified, exit 1" \
    "[ $rc -eq 1 ] && grep -q 'noise.png' '$T/ex.err' && grep -q 'im0.png' '$T/ex.txt'" "rc $rc: $(cat "$T/ex.err")"
LD_LIBRARY_PATH=$L "$T/classify" vit_fmnist_tiny "$T/vit_fmnist_tiny.safetensors" "$T/im0.png" >/dev/full 2>"$T/ex.err"
rc=$?
check "example: results on a full disk are an error, exit 1" \
    "[ $rc -eq 1 ] && grep -q 'error writing standard output' '$T/ex.err'" "rc $rc: $(cat "$T/ex.err")"
LD_LIBRARY_PATH=$L "$T/classify" no_such_model "$T/vit_fmnist_tiny.safetensors" "$T/im0.png" >/dev/null 2>"$T/ex.err"
rc=$?
check "example: an unknown model is an error message from the library, exit 2 from its code" \
    "[ $rc -eq 2 ] && grep -q \"unknown model 'no_such_model'\" '$T/ex.err'" "rc $rc: $(cat "$T/ex.err")"

make --no-print-directory uninstall PREFIX="$P" >"$T/un.log" 2>&1
rc=$?
check "make uninstall removes every installed file" "[ $rc -eq 0 ] && [ -z \"\$(find '$P' -type f -o -type l)\" ]" \
    "rc $rc: $(find "$P" -type f -o -type l)"

make --no-print-directory install PREFIX=/opt/vitc-test DESTDIR="$T/stage" >"$T/d.log" 2>&1
rc=$?
check "DESTDIR: files staged under DESTDIR, vitc.pc names the real PREFIX" \
    "[ $rc -eq 0 ] && [ -f '$T/stage/opt/vitc-test/lib/libvitc.so.$VER' ] && [ ! -e /opt/vitc-test ] && \
    grep -qx 'prefix=/opt/vitc-test' '$T/stage/opt/vitc-test/lib/pkgconfig/vitc.pc'" "rc $rc: $(tail -3 "$T/d.log")"
make --no-print-directory uninstall PREFIX=/opt/vitc-test DESTDIR="$T/stage" >/dev/null 2>&1
check "DESTDIR: uninstall" "[ -z \"\$(find '$T/stage' -type f -o -type l)\" ]"
# an install folder with a blank is refused before any command (the recipes split it: a PREFIX "DIR/a b" had made
# DIR/a and ./b/... in the source tree)
make --no-print-directory install PREFIX="$T/sp ace" >"$T/sp.log" 2>&1
rc=$?
check "a PREFIX with a blank refused, nothing made" "[ $rc -ne 0 ] && grep -q 'must not hold blanks' '$T/sp.log' && \
    [ ! -e '$T/sp' ] && [ ! -e ace ]" "rc $rc: $(tail -3 "$T/sp.log")"
