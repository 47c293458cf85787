#!/usr/bin/env bash
# int8 inference (`--dtype int8`): the issue's accuracy gates on a model trained here for one epoch on 20,000
# Fashion-MNIST images (test accuracy within 0.1 point of fp32, top-1 agreement with fp32 at least 99.5% over the
# 10,000 test images); int8 logits near fp32's through `forward`; refusals (training, unknown dtypes).
. "$(dirname "$0")/lib.sh"
V=./vitc

$V train vit_fmnist_p7 --data fashion-mnist --epochs 1 --batch-size 128 --lr 1e-3 --warmup-epochs 0.3 --clip-grad 1 \
    --no-augment --smoothing 0 --train-subset 20000 --log-every 1000 --out "$T/run" >"$T/train.log" 2>&1
check "training for the gates runs" "[ -s '$T/run/weights.safetensors' ]" "$(tail -3 "$T/train.log")"
# the gates as the dispatch rules run it (the layers where int8 is faster), and with every linear layer on int8
for gemm in auto onednn; do
    VITC_GEMM=$gemm $V eval vit_fmnist_p7 --weights "$T/run/weights.safetensors" --data fashion-mnist --dtype int8 \
        --json >"$T/eval.json" 2>"$T/eval.err"
    check "eval --dtype int8 runs (VITC_GEMM=$gemm)" "[ $? -eq 0 ]" "$(tail -3 "$T/eval.err")"
    gates=$(/usr/bin/python3 - "$T/eval.json" "$gemm" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
ok = (d["dtype"] == "int8" and d["images"] == 10000 and abs(d["acc1"] - d["fp32_acc1"]) <= 0.1
      and d["top1_agreement"] >= 99.5 and (sys.argv[2] != "onednn" or d["int8_linears"] == d["linears"] == 18))
print(("ok " if ok else "bad ") + json.dumps(d))
PY
)
    what="VITC_GEMM=$gemm"
    [ $gemm = onednn ] && what="$what: all 18 layers int8"
    check "int8 accuracy within 0.1 point of fp32 and top-1 agreement >= 99.5% ($what)" "[ \"\${gates%% *}\" = ok ]" \
        "$gates"
done

# forward: logits of 4 test images in fp32 and int8, close but not equal
fmnist_input "$T/x.safetensors" 4 3
$V forward vit_fmnist_p7 --weights "$T/run/weights.safetensors" --input "$T/x.safetensors" -o "$T/f32.safetensors" \
    >"$T/f.log" 2>&1 &&
    $V forward vit_fmnist_p7 --weights "$T/run/weights.safetensors" --input "$T/x.safetensors" --dtype int8 \
        -o "$T/q8.safetensors" >>"$T/f.log" 2>&1
check "forward --dtype int8 runs" "[ $? -eq 0 ]" "$(tail -3 "$T/f.log")"
near=$(logits_near "$T/f32.safetensors" "$T/q8.safetensors" 0.05 int8)
check "int8 logits within 5% of the range of fp32's, not equal" "[ \"\${near%% *}\" = ok ]" "$near"

$V bench vit_fmnist_p7 --batch-size 8 --iters 1 --dtype int8 >"$T/b.log" 2>&1
check "bench --dtype int8 says so, how many layers ran int8, and its share of the int8 GEMM's peak" \
    "grep -q 'int8 inference batch 8.*% of the int8 GEMM peak' '$T/b.log' && \
     grep -Eq '^int8: [1-9][0-9]* of 18 linear layers.*int8 linear 1024.3 .*: [0-9.]+ GFLOP/s' '$T/b.log'" \
    "$(tail -2 "$T/b.log")"
VITC_GEMM=openblas $V bench vit_fmnist_p7 --batch-size 8 --iters 1 --dtype int8 >"$T/bo.log" 2>&1
check "bench --dtype int8 warns when no layer could run int8 (VITC_GEMM=openblas)" \
    "grep -q 'WARNING: --dtype int8, but none of the 18 linear layers' '$T/bo.log'" "$(tail -2 "$T/bo.log")"
$V bench vit_fmnist_p7 --batch-size 8 --iters 1 --train --dtype int8 >"$T/bt.log" 2>&1
check "bench --train --dtype int8 refused" "[ $? -ne 0 ] && grep -q 'for inference' '$T/bt.log'" "$(cat "$T/bt.log")"
$V eval vit_fmnist_p7 --weights "$T/run/weights.safetensors" --data fashion-mnist --dtype fp16 >"$T/bf.log" 2>&1
check "unknown --dtype refused" "[ $? -ne 0 ] && grep -q \"unknown --dtype 'fp16'\" '$T/bf.log'" "$(cat "$T/bf.log")"
$V train vit_fmnist_p7 --data fashion-mnist --epochs 1 --dtype int8 --out "$T/t8" >"$T/t8.log" 2>&1
check "train --dtype int8 refused" "[ $? -ne 0 ] && grep -q -- '--dtype' '$T/t8.log'" "$(cat "$T/t8.log")"

# no linear layer on the int8 kernel (VITC_GEMM=openblas): forward, predict and eval warn as bench does, and eval's
# result says that it ran fp32
W8="$T/run/weights.safetensors"
VITC_GEMM=openblas $V forward vit_fmnist_p7 --weights "$W8" --input "$T/x.safetensors" --dtype int8 \
    -o "$T/fo.safetensors" >"$T/fo.log" 2>&1
check "forward --dtype int8 warns when no layer ran int8" \
    "[ $? -eq 0 ] && grep -q 'warning: --dtype int8, but none of the 18 linear layers .*: this ran fp32' '$T/fo.log'" \
    "$(cat "$T/fo.log")"
/usr/bin/python3 -c "from PIL import Image; Image.new('L', (28, 28), 90).save('$T/img.png')"
VITC_GEMM=openblas $V predict vit_fmnist_p7 --weights "$W8" --dtype int8 "$T/img.png" >"$T/po.log" 2>&1
check "predict --dtype int8 warns when no layer ran int8" \
    "[ $? -eq 0 ] && grep -q 'warning: --dtype int8, but none of the 18 linear layers' '$T/po.log'" "$(cat "$T/po.log")"
VITC_GEMM=openblas $V eval vit_fmnist_p7 --weights "$W8" --data fashion-mnist --test-subset 200 --dtype int8 --json \
    >"$T/eo.json" 2>"$T/eo.err"
eo=$(/usr/bin/python3 - "$T/eo.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
ok = d["dtype"] == "fp32 (int8 requested; no layer ran int8)" and d["int8_linears"] == 0 and "top1_agreement" not in d
print(("ok " if ok else "bad ") + json.dumps(d))
PY
)
check "eval --dtype int8 --json says fp32 when no layer ran int8, and warns" \
    "[ \"\${eo%% *}\" = ok ] && grep -q 'warning: --dtype int8, but none' '$T/eo.err'" "$eo $(tail -2 "$T/eo.err")"
VITC_GEMM=openblas $V eval vit_fmnist_p7 --weights "$W8" --data fashion-mnist --test-subset 200 --dtype int8 \
    >"$T/et.log" 2>/dev/null
check "... and its text result too" "grep -q '^vit_fmnist_p7 (fp32: int8 requested, no layer ran int8) on' '$T/et.log'" \
    "$(cat "$T/et.log")"
