#!/usr/bin/env bash
# GEMM libraries from the command line: `vitc bench` (text and --json) reports the CPU, its ISA, both libraries'
# kernels, the dispatch rule, each library's sgemm peak and a warning when OpenBLAS runs generic kernels
# (OPENBLAS_CORETYPE=Prescott emulates Debian's OpenBLAS 0.3.21 on a Xeon it does not know); VITC_GEMM forces a
# library or is refused; forward logits and training gradients agree across openblas, onednn and auto.
. "$(dirname "$0")/lib.sh"
V=./vitc
PY=/usr/bin/python3
unset OPENBLAS_CORETYPE VITC_GEMM

# Fields of a bench --json line: prints "ok" or what is wrong. $1: file, $2: python condition on the dict j.
json_check() {
    $PY - "$1" "$2" <<'EOF'
import json, sys
try:
    j = json.loads(open(sys.argv[1]).read())
except Exception as e:
    print(f"not JSON: {e}"); sys.exit()
need = {"cpu_model": str, "isa": dict, "openblas_core": str, "onednn_isa": str, "gemm_lib": str, "gemm_rule": str,
        "sgemm_gflops": float, "sgemm_gflops_openblas": float, "sgemm_gflops_onednn": float, "img_size": str}
for k, t in need.items():
    if not isinstance(j.get(k), t) or (t is str and not j[k]):
        print(f"{k} missing or not a {t.__name__}: {j.get(k)!r}"); sys.exit()
if sorted(j["isa"]) != ["amx", "avx2", "avx512", "avx512_bf16"] or not all(isinstance(v, bool) for v in j["isa"].values()):
    print(f"isa: {j['isa']}"); sys.exit()
if "gemm_warning" not in j:
    print("gemm_warning missing"); sys.exit()
print("ok" if eval(sys.argv[2]) else f"condition {sys.argv[2]} false for {j}")
EOF
}

$V bench vit_fmnist_tiny --batch-size 8 --iters 2 --json >"$T/b.json" 2>"$T/b.err"
r=$(json_check "$T/b.json" "j['gemm_lib'] == 'auto' and j['sgemm_gflops'] == max(j['sgemm_gflops_openblas'], j['sgemm_gflops_onednn']) > 0 and j['bf16_gemm_gflops'] is None and j['int8_gemm_gflops'] is None and j['img_size'] == '28'")
check "bench --json reports CPU, ISA, kernels, rule, each library's sgemm peak, null for the peaks not measured" "[ '$r' = ok ]" "$r $(cat "$T/b.err")"
avx2=$($PY -c "import json,sys; print(int(json.load(open(sys.argv[1]))['isa']['avx2']))" "$T/b.json" 2>/dev/null)
$V bench vit_fmnist_tiny --batch-size 8 --iters 2 --profile --json 2>"$T/k.err" | tail -n 1 >"$T/k.json"
r=$(json_check "$T/k.json" "(lambda k: 0 < k['fused_gemm_calls'] <= k['fused'] and abs(k['gemm'] + k['fused'] + k['other'] - 1) < 1e-3)(j['time_by_kind'])")
check "bench --profile --json: the split by kind and the fused ops' GEMM calls within their share" "[ '$r' = ok ]" \
    "$r $(cat "$T/k.err")"

$V bench vit_fmnist_tiny --batch-size 8 --iters 2 >"$T/b.txt" 2>&1
check "bench text names the CPU, the kernels and the dispatch" \
    "grep -q '^cpu: ' '$T/b.txt' && grep -q '^gemm kernels: OpenBLAS \"' '$T/b.txt' && grep -q '^gemm dispatch (auto): ' '$T/b.txt'" \
    "$(cat "$T/b.txt")"

if [ "$avx2" = 1 ]; then
    OPENBLAS_CORETYPE=Prescott $V bench vit_fmnist_tiny --batch-size 8 --iters 2 --json >"$T/p.json" 2>"$T/p.err"
    r=$(json_check "$T/p.json" "j['openblas_core'] == 'Prescott' and 'oneDNN' in (j['gemm_warning'] or '') and j['gemm_rule'].startswith('every shape: onednn')")
    check "OPENBLAS_CORETYPE=Prescott: warning, every GEMM on oneDNN" "[ '$r' = ok ]" "$r $(cat "$T/p.err")"
    OPENBLAS_CORETYPE=Prescott $V bench vit_fmnist_tiny --batch-size 8 --iters 2 >"$T/p.txt" 2>&1
    check "OPENBLAS_CORETYPE=Prescott: a WARNING line saying what vitc does" \
        "grep -q '^WARNING: OpenBLAS runs its \"Prescott\" kernels.*vitc runs every GEMM on oneDNN' '$T/p.txt'" "$(cat "$T/p.txt")"
else
    skip "OPENBLAS_CORETYPE=Prescott" "no AVX2 on this CPU"
fi

VITC_GEMM=openblas $V bench vit_fmnist_tiny --batch-size 8 --iters 2 --threads 1 --json >"$T/o.json" 2>"$T/o.err"
r=$(json_check "$T/o.json" "j['gemm_lib'] == 'openblas' and 'forced' in j['gemm_rule'] and j['threads'] == 1")
check "VITC_GEMM=openblas forces OpenBLAS (and --threads 1 is reported)" "[ '$r' = ok ]" "$r $(cat "$T/o.err")"
VITC_GEMM=mkl $V bench vit_fmnist_tiny --batch-size 8 --iters 2 >"$T/m.txt" 2>&1
rc=$?
check "VITC_GEMM=mkl is refused with a message, a usage error (2)" \
    "[ $rc -eq 2 ] && grep -q \"GEMM library 'mkl' unknown\" '$T/m.txt'" \
    "rc $rc: $(cat "$T/m.txt")"

# the same logits and gradients whichever library runs the GEMMs (float32 summation order differs: 1e-4)
$V init vit_fmnist_tiny -o "$T/w.safetensors" --seed 5 >/dev/null 2>&1
$PY - "$T/x.safetensors" <<'EOF'
import sys
sys.path.insert(0, "tests/reference")
import numpy as np
import st
r = np.random.default_rng(0)
st.save(sys.argv[1], {"input": r.standard_normal((5, 1, 28, 28)).astype(np.float32),
                      "labels": np.array([0, 3, 9, 1, 4], dtype=np.int64)})
EOF
# avx2: both libraries held to AVX2 kernels, as on an AVX2-only CPU (GEMM rule 12's packed 1x1 convs in inference)
AVX2_ENV="VITC_GEMM=auto DNNL_MAX_CPU_ISA=AVX2 OPENBLAS_CORETYPE=Haswell"
for lib in openblas onednn auto avx2; do
    envs="VITC_GEMM=$lib"
    [ $lib = avx2 ] && envs=$AVX2_ENV
    env $envs $V forward vit_fmnist_tiny -w "$T/w.safetensors" --input "$T/x.safetensors" -o "$T/f_$lib.safetensors" \
        >"$T/f_$lib.log" 2>&1 || echo "forward $lib failed: $(cat "$T/f_$lib.log")"
    env $envs $V grad vit_fmnist_tiny -w "$T/w.safetensors" --input "$T/x.safetensors" -o "$T/g_$lib.safetensors" \
        >"$T/g_$lib.log" 2>&1 || echo "grad $lib failed: $(cat "$T/g_$lib.log")"
done
r=$($PY - "$T" <<'EOF'
import sys
sys.path.insert(0, "tests/reference")
import numpy as np
import st
d = sys.argv[1]
worst = 0.0
try:
    for kind in ("f", "g"):
        ref = st.load(f"{d}/{kind}_openblas.safetensors")
        for lib in ("onednn", "auto", "avx2"):
            other = st.load(f"{d}/{kind}_{lib}.safetensors")
            assert sorted(ref) == sorted(other), f"{kind} {lib}: tensors differ"
            for k in ref:
                a, b = np.asarray(ref[k], np.float64), np.asarray(other[k], np.float64)
                worst = max(worst, float(np.max(np.abs(a - b)) / (1e-6 + np.max(np.abs(a)))))
except Exception as e:
    print(f"error: {e}"); sys.exit()
print("ok" if worst < 1e-4 else f"worst relative difference {worst:.3g}")
EOF
)
check "forward logits and every gradient agree across openblas, onednn, auto and auto held to AVX2" "[ '$r' = ok ]" "$r"
if [ "$avx2" = 1 ]; then
    env $AVX2_ENV $V bench vit_fmnist_tiny --batch-size 4 --iters 1 --profile >"$T/a2.log" 2>&1
    check "held to AVX2, inference linears run as packed 1x1 convs (rule 12)" \
        "grep -q 'linear.onednn_conv1x1' '$T/a2.log' && ! grep -q 'linear.onednn_matmul' '$T/a2.log'" "$(cat "$T/a2.log")"
fi
# bench/vendor_rules.c: the graphs with the other CPU vendor's GEMM rules compute the same logits and gradients
# (and with --tail-n, rule 14 flipped instead; with --pack, rule 12; with --wt-first, rule 15)
for spec in "pvt_v2_b1 1 train 1" "deit_tiny_patch16_224 1 eval 1" "deit_tiny_hmhsa_cffn 16 --tail-n eval 2" \
    "nextvit_small 1 --pack eval 1" "deit_tiny_patch16_224 16 --wt-first train 1"; do
    OMP_NUM_THREADS=2 ./build/vendor_rules $spec --check >"$T/vr.log" 2>&1
    r=$(awk '/^check: logits/ { gsub(",", ""); print ($3 + 0 <= 1e-4 && $6 + 0 <= 1e-4 && $10 + 0 <= 1e-4) ? "ok" : $0 }' \
        "$T/vr.log")
    check "vendor_rules $spec: the other vendor's rules (or rule 14, 12 or 15 flipped) agree and the ratio is printed" \
        "[ '$r' = ok ] && grep -q 'flipped/detected median' '$T/vr.log'" "$(cat "$T/vr.log")"
done
./build/vendor_rules no_such_model 1 >"$T/vr.log" 2>&1
check "vendor_rules refuses an unknown model" "[ $? -eq 2 ] && grep -q 'unknown model no_such_model' '$T/vr.log'" \
    "$(cat "$T/vr.log")"
./build/vendor_rules deit_tiny_patch16_224 1 eval 1 --bf16 --tail-n >"$T/vr.log" 2>&1
check "vendor_rules refuses --bf16 with --tail-n" "[ $? -eq 2 ] && grep -q 'one at a time' '$T/vr.log'" \
    "$(cat "$T/vr.log")"
./build/vendor_rules deit_tiny_patch16_224 1 eval 1 --pack --tail-n >"$T/vr.log" 2>&1
check "vendor_rules refuses --pack with --tail-n" "[ $? -eq 2 ] && grep -q 'one at a time' '$T/vr.log'" \
    "$(cat "$T/vr.log")"
./build/vendor_rules deit_tiny_patch16_224 0 >"$T/vr.log" 2>&1
check "vendor_rules refuses batch 0" "[ $? -eq 2 ] && grep -q 'must be positive' '$T/vr.log'" "$(cat "$T/vr.log")"
# bench/attn_ops.c: hMHSA's op against the plain one at each host's shapes, a line per stage with both times and ratios
for spec in "pvt_v2_b1 train 1 1:4" "nextvit_small eval 2 1:2" "deit_tiny train 1 1:1"; do
    OMP_NUM_THREADS=2 ./build/attn_ops ${spec%:*} >"$T/ao.log" 2>&1
    n=$(grep -cE '^stage [0-9]+ .*plain [0-9.]+ ms, hallucinated [0-9.]+ ms, ratio [0-9.]+, MACs ratio 0*[.1-9]' \
        "$T/ao.log")
    check "attn_ops ${spec%:*}: ${spec#*:} stage lines" "[ '$n' = '${spec#*:}' ] && grep -q '^cpu\|cpu: ' '$T/ao.log'" \
        "$(cat "$T/ao.log")"
done
./build/attn_ops no_such_host >"$T/ao.log" 2>&1
check "attn_ops refuses an unknown host" "[ $? -eq 2 ] && grep -q 'unknown host no_such_host' '$T/ao.log'" \
    "$(cat "$T/ao.log")"

# bench/stripe_attn.c: CSwin's attention core as one op against the chain, a line per two-branch stage of CSwin-T
for mode in eval train; do
    OMP_NUM_THREADS=2 ./build/stripe_attn $mode 1 2 >"$T/sa.log" 2>&1
    n=$(grep -cE '^stage [1-3] .*chain best [0-9.]+ median [0-9.]+ ms, op best [0-9.]+ median [0-9.]+ ms, chain / op \(medians\) [0-9.]+$' \
        "$T/sa.log")
    check "stripe_attn $mode: 3 stage lines" "[ '$n' = 3 ] && grep -q 'cpu: ' '$T/sa.log'" "$(cat "$T/sa.log")"
done
./build/stripe_attn sideways >"$T/sa.log" 2>&1
check "stripe_attn refuses an unknown mode" "[ $? -eq 2 ] && grep -q 'usage: stripe_attn' '$T/sa.log'" \
    "$(cat "$T/sa.log")"
