#!/usr/bin/env bash
# The CLI built with ASan + UBSan (build-asan/vitc, leak detection on): a short Fashion-MNIST training run with a
# resume, then init, forward, grad, deploy (cFFN; Next-ViT's merge_bn and form record), predict, bench and attention
# (every view: mhsa with rollout, FLatten's factorised maps, Swin's windows) on small models; any sanitizer report
# fails the test.
. "$(dirname "$0")/lib.sh"
V=./build-asan/vitc
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 OMP_NUM_THREADS=2
# run NAME CMD...: exit 0 and no sanitizer report
run() {
    local name=$1
    shift
    "$@" >"$T/o.log" 2>&1
    local rc=$?
    if [ $rc -eq 0 ] && ! grep -qE 'ERROR: (Address|Leak)Sanitizer|runtime error:' "$T/o.log"; then ok "$name"; else
        bad "$name" "rc $rc: $(grep -E -A8 'Sanitizer|runtime error' "$T/o.log" | head -20; tail -3 "$T/o.log")"; fi
}
[ -x "$V" ] || { bad "asan binary" "$V missing (make build-asan/vitc)"; exit 1; }
M=vit_fmnist_tiny
TR="$M --data fashion-mnist --batch-size 32 --lr 2e-3 --train-subset 256 --test-subset 64 --log-every 4"
run "train 1 epoch" $V train $TR --epochs 1 --out "$T/r"
run "resume to 2 epochs" $V train $TR --epochs 2 --out "$T/r" --resume "$T/r"
run "eval" $V eval $M -w "$T/r/weights.safetensors" --data fashion-mnist --test-subset 64
/usr/bin/python3 - "$T" <<'PY'
import sys
sys.path.insert(0, "tests/reference")
import numpy as np, st
st.save(f"{sys.argv[1]}/x.safetensors", {"input": np.random.default_rng(1).standard_normal((2, 1, 28, 28)).astype(np.float32),
                                         "labels": np.array([3, 7], np.int64)})
st.save(f"{sys.argv[1]}/x3.safetensors", {"input": np.random.default_rng(2).standard_normal((1, 3, 32, 32)).astype(np.float32)})
PY
run "forward" $V forward $M -w "$T/r/weights.safetensors" --input "$T/x.safetensors" -o "$T/y.safetensors"
run "grad with 2 AdamW steps" $V grad $M -w "$T/r/weights.safetensors" --input "$T/x.safetensors" -o "$T/g.safetensors" --steps 2
run "cFFN training-form init" $V init $M --ffn cffn --attn hmhsa --train-form -o "$T/hc.safetensors"
run "deploy" $V deploy $M --ffn cffn --attn hmhsa -w "$T/hc.safetensors" -o "$T/hd.safetensors"
NV="nextvit_small_hmhsa_cffn --depths 1,1,5,1 --img-size 32 --num-classes 10"
run "Next-ViT training-form init" $V init $NV --train-form -o "$T/nv.safetensors"
run "Next-ViT deploy (cFFN merge + merge_bn)" $V deploy $NV -w "$T/nv.safetensors" -o "$T/nvd.safetensors"
run "Next-ViT deployed forward" $V forward $NV -w "$T/nvd.safetensors" --input "$T/x3.safetensors" -o "$T/nvy.safetensors"
run "Next-ViT training-form file forward (its recorded form taken)" $V forward $NV -w "$T/nv.safetensors" \
    --input "$T/x3.safetensors" -o "$T/nvy.safetensors"
"$V" forward $NV --train-form -w "$T/nvd.safetensors" --input "$T/x3.safetensors" -o "$T/nvy.safetensors" >"$T/o.log" 2>&1
if [ $? -eq 1 ] && grep -q "deployed-form weights" "$T/o.log" && ! grep -qE 'Sanitizer|runtime error' "$T/o.log"; then
    ok "Next-ViT wrong-form load refused"; else bad "Next-ViT wrong-form load refused" "$(tail -3 "$T/o.log")"; fi
run "bench --train (gma)" $V bench vit_fmnist_tiny_gap --attn gma --batch-size 2 --iters 1 --train
run "bench groupmixformer_test" $V bench groupmixformer_test --batch-size 1 --iters 1
head -c 100 /dev/urandom >"$T/noise.png"
"$V" predict $M -w "$T/r/weights.safetensors" "$T/noise.png" >"$T/o.log" 2>&1
if [ $? -eq 1 ] && ! grep -qE 'Sanitizer|runtime error' "$T/o.log"; then ok "predict on a corrupt image"; else
    bad "predict on a corrupt image" "$(tail -5 "$T/o.log")"; fi
/usr/bin/python3 -c "
import sys; from PIL import Image; import numpy as np
Image.fromarray((np.random.default_rng(3).random((28, 28)) * 255).astype(np.uint8)).save(sys.argv[1])" "$T/img.png"
run "predict (top-k, JSON, --output)" $V predict $M -w "$T/r/weights.safetensors" --topk 3 --json \
    --output "$T/p.safetensors" "$T/img.png" "$T/img.png"
run "attention (mhsa, rollout, maps)" $V attention $M -w "$T/r/weights.safetensors" "$T/img.png" "$T/img.png" \
    -o "$T/a.png" --rollout --save-maps "$T/a.safetensors"
run "FLatten init" $V init $M --attn flatten -o "$T/fl.safetensors"
run "attention (FLatten, head mean)" $V attention $M --attn flatten -w "$T/fl.safetensors" "$T/img.png" -o "$T/f.png" \
    --heads mean --save-maps "$T/f.safetensors"
run "Swin init" $V init swin_fmnist_tiny -o "$T/sw.safetensors"
run "attention (Swin windows)" $V attention swin_fmnist_tiny -w "$T/sw.safetensors" "$T/img.png" -o "$T/s.png" \
    --save-maps "$T/s.safetensors"
"$V" attention $M -w "$T/r/weights.safetensors" "$T/img.png" -o "$T/e.png" --blocks 9 >"$T/o.log" 2>&1
if [ $? -eq 2 ] && grep -q "block 9" "$T/o.log" && ! grep -qE 'Sanitizer|runtime error' "$T/o.log"; then
    ok "attention: unknown block refused"; else bad "attention: unknown block refused" "$(tail -5 "$T/o.log")"; fi
