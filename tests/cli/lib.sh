# Shared by the CLI tests (sourced, not run): the repository root as working folder, a temporary folder $T removed
# on exit (with the paths a script adds to the array CLEANUP), and the report helpers: ok NAME, bad NAME DETAIL,
# check NAME CONDITION [DETAIL] (PASS/FAIL lines, counted by tests/run_all.sh), skip NAME WHY (a SKIP line, counted
# as neither: a check this machine cannot run). A script that printed a FAIL line exits 1, so that it fails when run
# alone too.
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
T=$(mktemp -d)
FAILS=0 CLEANUP=()
trap 'rc=$?; rm -rf "$T" "${CLEANUP[@]}"; [ "$FAILS" -eq 0 ] || exit 1; exit $rc' EXIT
ok() { echo "PASS $1"; }
bad() { echo "FAIL $1: $2"; FAILS=$((FAILS + 1)); }
skip() { echo "SKIP $1: $2"; }
check() { if eval "$2"; then ok "$1"; else bad "$1" "${3:-$2}"; fi; }
# st_data FILE: a safetensors file's tensor bytes, without its header (whose metadata, e.g. weights_best's epoch,
# differs between files of the same tensors).
st_data() { tail -c +$((9 + $(od -An -t u8 -N 8 "$1" | tr -d ' '))) "$1"; }
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
# fmnist_input FILE B SEED: writes a safetensors file whose `input` is (B, 1, 28, 28) of standard normal values
# (Python's random seeded with SEED), for `vitc forward` on the Fashion-MNIST models.
fmnist_input() {
    /usr/bin/python3 - "$1" "$2" "$3" <<'PY'
import json, random, struct, sys
random.seed(int(sys.argv[3]))
b = int(sys.argv[2]); n = b * 28 * 28
vals = [random.gauss(0, 1) for _ in range(n)]
hdr = json.dumps({"input": {"dtype": "F32", "shape": [b, 1, 28, 28], "data_offsets": [0, 4 * n]}}).encode()
hdr += b" " * (-len(hdr) % 8)
open(sys.argv[1], "wb").write(struct.pack("<Q", len(hdr)) + hdr + struct.pack("<%df" % n, *vals))
PY
}
# logits_near REF OTHER FRAC NAME: prints "ok ..." when the first tensor of safetensors file OTHER differs from REF's,
# by at most FRAC of the range of REF's values, else "bad ..." (NAME labels OTHER in the message).
logits_near() {
    /usr/bin/python3 - "$1" "$2" "$3" "$4" <<'PY'
import json, struct, sys
def read(p):
    b = open(p, "rb").read(); n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8 + n])
    e = next(v for k, v in h.items() if k != "__metadata__"); s, t = e["data_offsets"]
    return struct.unpack("<%df" % ((t - s) // 4), b[8 + n + s:8 + n + t])
a, q = read(sys.argv[1]), read(sys.argv[2])
err, rng = max(abs(x - y) for x, y in zip(a, q)), max(a) - min(a)
print(("ok" if 0 < err < float(sys.argv[3]) * rng else "bad") +
      " max |%s - fp32| %.4g of a logit range %.4g" % (sys.argv[4], err, rng))
PY
}
# meta FILE KEY: prints the value safetensors FILE's __metadata__ records under KEY.
meta() {
    /usr/bin/python3 -c "import sys; sys.path.insert(0, 'tests/reference'); import st
print(st.parse(open(sys.argv[1], 'rb').read())[0]['__metadata__'][sys.argv[2]])" "$1" "$2"
}
# rerecord IN OUT KEY[=VALUE]...: writes OUT, safetensors file IN with its __metadata__ changed: KEY=VALUE sets KEY,
# KEY alone drops it (`rerecord W OUT vitc_model vitc_model_options`: a weight file as a converted checkpoint, or one
# of an older vitc, has no record of its model's options).
rerecord() {
    /usr/bin/python3 - "$@" <<'PY'
import json, struct, sys
b = open(sys.argv[1], "rb").read(); n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8 + n])
for kv in sys.argv[3:]:
    k, eq, v = kv.partition("=")
    h.setdefault("__metadata__", {}).update({k: v}) if eq else h.get("__metadata__", {}).pop(k, None)
hdr = json.dumps(h).encode(); hdr += b" " * (-len(hdr) % 8)
open(sys.argv[2], "wb").write(struct.pack("<Q", len(hdr)) + hdr + b[8 + n:])
PY
}
