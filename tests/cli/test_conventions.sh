#!/usr/bin/env bash
# Conventions: `vitc list --csv` and `vitc bench --csv` with timm's column names (benchmark.py: samples/s, step time
# in ms, batch, image size, GMACs per image, params in millions) and parsable values; progress of long runs (predict,
# eval, bench, train) as plain periodic lines when piped (no carriage return) and one line redrawn on a terminal;
# `vitc forward` / `predict` take the image size from the input where the weights allow it, a clear error otherwise.
. "$(dirname "$0")/lib.sh"
V=./vitc
PY=/usr/bin/python3
export OMP_NUM_THREADS=2

# ---- list --csv
$V list --csv >"$T/list.csv" 2>"$T/list.err"
$V list >"$T/list.txt" 2>&1
r=$($PY - "$T/list.csv" "$T/list.txt" <<'EOF'
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
want = "model,param_count,gmacs,img_size,in_chans,num_classes,crop_pct,interpolation,family".split(",")
text = open(sys.argv[2]).read().splitlines()[1:]
if rows[0] != want: print(f"header {rows[0]}"); sys.exit()
if len(rows) - 1 != len(text): print(f"{len(rows) - 1} rows vs {len(text)} models in vitc list"); sys.exit()
names = [l.split()[0] for l in text]
if [r[0] for r in rows[1:]] != names: print("model names differ from vitc list"); sys.exit()
for r in rows[1:]:
    if len(r) != len(want): print(f"row {r}"); sys.exit()
    p, g, s, c, k, cp = float(r[1]), float(r[2]), int(r[3]), int(r[4]), int(r[5]), float(r[6])
    if not (p > 0 and g > 0 and s > 0 and c > 0 and k > 0 and 0 < cp <= 2 and r[7] and r[8]): print(f"row {r}"); sys.exit()
d = {r[0]: r for r in rows[1:]}["deit_tiny_patch16_224"]
# exact count (5,717,416 in millions), 224 px, ImageNet classes; params/GMACs equal `vitc list`'s
t = [l.split() for l in text if l.startswith("deit_tiny_patch16_224 ")][0]
ok = d[1] == "5.717416" and d[3] == "224" and d[5] == "1000" and d[8] == "vit" and abs(float(d[2]) - float(t[2])) < 5e-4
print("ok" if ok else f"deit row {d} vs {t}")
EOF
)
check "list --csv: header, one parsable row per model of vitc list" "[ '$r' = ok ]" "$r $(cat "$T/list.err")"

# ---- bench --csv (inference and training)
$V bench vit_fmnist_tiny --batch-size 8 --iters 20 --csv >"$T/bi.csv" 2>"$T/bi.err"
$V bench vit_fmnist_tiny --batch-size 4 --iters 5 --train --csv >"$T/bt.csv" 2>"$T/bt.err"
r=$($PY - "$T/bi.csv" "$T/bt.csv" "$T/list.csv" <<'EOF'
import csv, sys
inf, tr, ls = (list(csv.DictReader(open(p))) for p in sys.argv[1:4])
ref = {r["model"]: r for r in ls}["vit_fmnist_tiny"]
hi = list(csv.reader(open(sys.argv[1])))[0]
ht = list(csv.reader(open(sys.argv[2])))[0]
if hi != "model,infer_samples_per_sec,infer_step_time,infer_batch_size,infer_img_size,infer_gmacs,param_count".split(","):
    print(f"infer header {hi}"); sys.exit()
if ht != "model,train_samples_per_sec,train_step_time,train_batch_size,train_img_size,param_count".split(","):
    print(f"train header {ht}"); sys.exit()
if len(inf) != 1 or len(tr) != 1: print("one row each expected"); sys.exit()
i, t = inf[0], tr[0]
for row, m, b in ((i, "infer", 8), (t, "train", 4)):
    sps, st = float(row[f"{m}_samples_per_sec"]), float(row[f"{m}_step_time"])
    if row["model"] != "vit_fmnist_tiny" or int(row[f"{m}_batch_size"]) != b or int(row[f"{m}_img_size"]) != 28:
        print(f"{m} row {row}"); sys.exit()
    if not (sps > 0 and st > 0 and abs(sps * st / 1000 / b - 1) < 0.02):  # samples/s = batch / step time (ms)
        print(f"{m}: {sps} samples/s vs {st} ms/step at batch {b}"); sys.exit()
    if abs(float(row["param_count"]) - float(ref["param_count"])) > 1e-6: print(f"{m} params {row}"); sys.exit()
if abs(float(i["infer_gmacs"]) - float(ref["gmacs"])) > 1e-6: print(f"gmacs {i} vs {ref}"); sys.exit()
print("ok")
EOF
)
check "bench --csv: timm's infer_ and train_ columns, consistent values" "[ '$r' = ok ]" \
    "$r $(cat "$T/bi.csv" "$T/bt.csv" "$T/bi.err")"
# a variant's row names the options that made it (one key per model benchmarked), quoted where they hold a comma
$V bench vit_fmnist_tiny --attn flatten --ffn cffn --batch-size 2 --iters 2 --csv >"$T/bv.csv" 2>"$T/bv.err"
$V bench groupmixformer_test --dims 20,30,40,50 --batch-size 2 --iters 2 --csv >"$T/bg.csv" 2>"$T/bg.err"
r=$($PY - "$T/bv.csv" "$T/bg.csv" <<'EOF'
import csv, sys
v, g = (list(csv.DictReader(open(p))) for p in sys.argv[1:3])
want = ["vit_fmnist_tiny --attn flatten --ffn cffn", "groupmixformer_test --dims 20,30,40,50"]
print("ok" if len(v) == len(g) == 1 and [v[0]["model"], g[0]["model"]] == want else f"{v} {g}")
EOF
)
check "bench --csv: a variant's model column holds its options" "[ '$r' = ok ]" "$r $(cat "$T/bv.err" "$T/bg.err")"
# bench --json: the parameters and MACs of the form it ran, as `vitc info --json` gives them
$V bench vit_fmnist_tiny --ffn cffn --batch-size 2 --iters 1 --json >"$T/bj.json" 2>/dev/null
$V bench vit_fmnist_tiny --ffn cffn --batch-size 2 --iters 1 --train --json >"$T/bjt.json" 2>/dev/null
$V info vit_fmnist_tiny --ffn cffn --json >"$T/ij.json" 2>/dev/null
$V info vit_fmnist_tiny --ffn cffn --train-form --json >"$T/ijt.json" 2>/dev/null
r=$($PY - "$T/bj.json" "$T/bjt.json" "$T/ij.json" "$T/ijt.json" <<'EOF'
import json, sys
b, bt, i, it = (json.load(open(p)) for p in sys.argv[1:5])
ok = b["params"] == i["params"] and bt["params"] == it["params"] and it["params"] > i["params"] and \
    abs(b["gmacs_per_img"] - i["macs"] / 1e9) < 1e-6
print("ok" if ok else f"bench {b['params']} / {bt['params']}, info {i['params']} / {it['params']}")
EOF
)
check "bench --json: params of the deployed form, and of the training form with --train (as info)" "[ '$r' = ok ]" "$r"
$V bench vit_fmnist_tiny --csv --json >"$T/o.txt" 2>&1
rc=$?
check "bench --csv --json is refused (contradictory: 2)" "[ $rc -eq 2 ] && grep -q 'csv excludes --json' '$T/o.txt'" \
    "rc $rc: $(cat "$T/o.txt")"

# ---- progress when piped: plain lines with rate and ETA, no carriage returns
has_cr() { grep -q $'\r' "$@"; }
check "bench: progress lines on stderr, the CSV alone on stdout" \
    "grep -Eq '^bench infer 20/20 \(100%\)  [0-9.]+ img/s  took [0-9]+:[0-9]{2}$' '$T/bi.err' && \
    [ \$(grep -c '^bench infer' '$T/bi.err') -ge 5 ] && grep -q '^bench train 5/5' '$T/bt.err' && \
    ! has_cr '$T/bi.err' '$T/bi.csv' && [ \$(wc -l < '$T/bi.csv') -eq 2 ]" "$(cat "$T/bi.err")"
$V bench vit_fmnist_tiny --iters 1 --csv >/dev/null 2>"$T/b1.err"
check "bench: no progress for one timed step" "[ $? -eq 0 ] && ! grep -q '^bench infer' '$T/b1.err'" "$(cat "$T/b1.err")"
$PY - "$T" <<'EOF'
import sys
from PIL import Image
import numpy as np
r = np.random.default_rng(1)
for i in range(30):
    Image.fromarray(r.integers(0, 255, (30 + i, 40, 3), dtype=np.uint8)).save(f"{sys.argv[1]}/p{i:02d}.png")
EOF
$V init vit_fmnist_tiny -o "$T/w.safetensors" >/dev/null
$V init groupmixformer_test -o "$T/g.safetensors" >/dev/null
$V predict vit_fmnist_tiny -w "$T/w.safetensors" --batch-size 3 "$T"/p*.png >"$T/p.out" 2>"$T/p.err"
rc=$?
check "predict over 30 images: periodic progress lines with rate and ETA on stderr" \
    "[ $rc -eq 0 ] && [ \$(grep -Ec '^predict [0-9]+/30 \( *[0-9]+%\)  [0-9.]+ img/s  (ETA|took) [0-9]+:[0-9]{2}$' '$T/p.err') -ge 5 ] && \
    grep -q '^predict 30/30 (100%)' '$T/p.err' && ! has_cr '$T/p.err' '$T/p.out' && [ \$(grep -c '^  1\.' '$T/p.out') -eq 30 ]" \
    "rc $rc: $(cat "$T/p.err")"
$V predict vit_fmnist_tiny -w "$T/w.safetensors" "$T/p00.png" >/dev/null 2>"$T/p1.err"
check "predict of one batch: no progress lines" "[ ! -s '$T/p1.err' ]" "$(cat "$T/p1.err")"
$V eval vit_fmnist_tiny -w "$T/w.safetensors" --data fashion-mnist --test-subset 1000 --batch-size 100 >"$T/e.out" \
    2>"$T/e.err"
rc=$?
check "eval: progress lines on stderr, the result on stdout" \
    "[ $rc -eq 0 ] && [ \$(grep -c '^Eval [0-9]*/1000' '$T/e.err') -ge 5 ] && grep -q '^Eval 1000/1000 (100%)' '$T/e.err' && \
    ! has_cr '$T/e.err' '$T/e.out' && grep -q 'top-1 accuracy' '$T/e.out'" "rc $rc: $(cat "$T/e.err" "$T/e.out")"
$V train vit_fmnist_tiny --data fashion-mnist --epochs 1 --batch-size 32 --train-subset 320 --test-subset 64 \
    --log-every 2 --out "$T/run" >"$T/t.out" 2>&1
rc=$?
check "train piped: a plain Train line every --log-every steps with the ETA, no carriage return" \
    "[ $rc -eq 0 ] && [ \$(grep -Ec '^Train: 0 \[ *[0-9]+/10 .*LR: [0-9.e+-]+  (ETA|took) [0-9]+:[0-9]{2}$' '$T/t.out') -eq 5 ] && \
    ! has_cr '$T/t.out'" "rc $rc: $(cat "$T/t.out")"

# ---- progress on a terminal: one line redrawn in place (script(1) gives the command a pseudo-terminal)
if command -v script >/dev/null; then
    script -qec "$V predict vit_fmnist_tiny -w $T/w.safetensors --batch-size 3 $(echo "$T"/p*.png)" /dev/null \
        >"$T/tty.out" 2>&1
    check "predict on a terminal: the progress line is redrawn (\\r, erase to end of line) and erased at the end" \
        "grep -q $'\\rpredict 30/30 (100%)' '$T/tty.out' && grep -q $'\\033\\[K' '$T/tty.out' && \
        [ \$(grep -c '^predict ' '$T/tty.out') -eq 0 ] && [ \$(grep -c 'class' '$T/tty.out') -ge 150 ]" \
        "$(head -c 600 "$T/tty.out" | cat -A)"
else
    bad "progress on a terminal" "no script(1) (Debian's bsdutils)"
fi

# ---- image size from the input
$PY - "$T" <<'EOF'
import sys
sys.path.insert(0, "tests/reference")
import numpy as np, st
r = np.random.default_rng(2)
st.save(f"{sys.argv[1]}/g32.safetensors", {"input": r.standard_normal((2, 3, 32, 32)).astype(np.float32)})
st.save(f"{sys.argv[1]}/v20.safetensors", {"input": r.standard_normal((1, 1, 20, 20)).astype(np.float32)})
st.save(f"{sys.argv[1]}/g3264.safetensors", {"input": r.standard_normal((1, 3, 32, 64)).astype(np.float32)})
st.save(f"{sys.argv[1]}/g3248.safetensors", {"input": r.standard_normal((1, 3, 32, 48)).astype(np.float32)})
st.save(f"{sys.argv[1]}/v2028.safetensors", {"input": r.standard_normal((1, 1, 28, 20)).astype(np.float32)})
st.save(f"{sys.argv[1]}/v3.safetensors", {"input": r.standard_normal((1, 1, 3, 3)).astype(np.float32)})
EOF
$V forward groupmixformer_test -w "$T/g.safetensors" --input "$T/g32.safetensors" -o "$T/y.safetensors" >"$T/f.log" 2>&1
rc1=$?
$V forward groupmixformer_test -w "$T/g.safetensors" --input "$T/g32.safetensors" -o "$T/f.safetensors" --features \
    >>"$T/f.log" 2>&1
rc2=$?
r=$($PY - "$T" <<'EOF'
import sys
sys.path.insert(0, "tests/reference")
import st
y, f = st.load(f"{sys.argv[1]}/y.safetensors"), st.load(f"{sys.argv[1]}/f.safetensors")
shapes = [tuple(f[f"features.{i}"].shape) for i in range(4)]
ok = tuple(y["logits"].shape) == (2, 10) and shapes == [(2, 20, 8, 8), (2, 30, 4, 4), (2, 40, 2, 2), (2, 50, 1, 1)]
print("ok" if ok else f"{y['logits'].shape} {shapes}")
EOF
)
check "forward: a model whose weights fit any size runs at the input's size (64 -> 32 px), logits and stage maps" \
    "[ $rc1 -eq 0 ] && [ $rc2 -eq 0 ] && [ '$r' = ok ]" "rc $rc1 $rc2: $r $(cat "$T/f.log")"
$V init groupmixformer_test --img-size 64 --num-classes 3 -o "$T/g64.safetensors" >/dev/null 2>&1
$V forward groupmixformer_test -w "$T/g64.safetensors" --input "$T/g32.safetensors" -o "$T/y64.safetensors" \
    >"$T/f64.log" 2>&1
rc=$?
check "... also with weights recording another --img-size: the recorded size is not the input's (their classes are)" \
    "[ $rc -eq 0 ] && [ \"\$($PY -c \"import sys; sys.path.insert(0, 'tests/reference'); import st; \
print(st.load('$T/y64.safetensors')['logits'].shape)\")\" = '(2, 3)' ]" "rc $rc: $(cat "$T/f64.log")"
$V forward groupmixformer_test -w "$T/g.safetensors" --input "$T/g3264.safetensors" -o "$T/f.safetensors" --features \
    >"$T/fn.log" 2>&1
rc=$?
r=$($PY - "$T" <<'EOF'
import sys
sys.path.insert(0, "tests/reference")
import st
print([tuple(v.shape) for k, v in sorted(st.load(f"{sys.argv[1]}/f.safetensors").items())])
EOF
)
check "forward: a non-square input where the official code takes one (GroupMixFormer 32x64): its stage maps" \
    "[ $rc -eq 0 ] && [ '$r' = '[(1, 20, 8, 16), (1, 30, 4, 8), (1, 40, 2, 4), (1, 50, 1, 2)]' ]" \
    "rc $rc: $r $(cat "$T/fn.log")"
$V forward groupmixformer_test -w "$T/g.safetensors" --input "$T/g3248.safetensors" -o "$T/yr.safetensors" >"$T/fr.log" 2>&1
rc=$?
check "forward: ... a side the family's rule refuses (48: stage-1 grid 12), naming it" \
    "[ $rc -eq 1 ] && grep -q 'image size 32x48: GroupMixFormer runs where' '$T/fr.log'" "rc $rc: $(cat "$T/fr.log")"
# --img-size HxW: the model built at that size (info's MACs, a weight file's record, predict's images)
$V info groupmixformer_test --img-size 32x64 --json >"$T/i3264.json" 2>&1
r=$($PY -c "import json; j = json.load(open('$T/i3264.json')); print(j['img_size'], j['img_w'])" 2>&1)
check "info --img-size 32x64: height 32, width 64" "[ '$r' = '32 64' ]" "$r $(head -c 300 "$T/i3264.json")"
$V init groupmixformer_test --img-size 32x64 -o "$T/g3264w.safetensors" >/dev/null 2>&1
$V forward groupmixformer_test -w "$T/g3264w.safetensors" --input "$T/g3264.safetensors" -o "$T/y3.safetensors" \
    >"$T/fw.log" 2>&1
check "... init records it, and forward builds the model so (a notice says)" \
    "[ $? -eq 0 ] && grep -q 'records: --img-size 32x64' '$T/fw.log'" "$(cat "$T/fw.log")"
$V predict groupmixformer_test -w "$T/g3264w.safetensors" docs/attention/msf.png --output "$T/pw.safetensors" \
    >"$T/pw.log" 2>&1
rc=$?
r=$($PY -c "import sys; sys.path.insert(0, 'tests/reference'); import st
print(tuple(st.load('$T/pw.safetensors')['input'].shape))" 2>&1)
check "... predict reads its images at 32x64 (timm's eval transform of a tuple size: test_predict.py)" \
    "[ $rc -eq 0 ] && [ '$r' = '(1, 3, 32, 64)' ]" "rc $rc: $r $(cat "$T/pw.log")"
$V bench groupmixformer_test --img-size 32x64 --iters 1 --threads 1 --csv >"$T/bw.csv" 2>"$T/bw.log"
r=$($PY -c "import csv; print(next(csv.DictReader(open('$T/bw.csv')))['infer_img_size'])" 2>&1)
check "... bench runs it, its CSV row's size 32x64" "[ '$r' = 32x64 ]" "$r $(cat "$T/bw.log" "$T/bw.csv")"
$V info groupmixformer_test --img-size 64x4097 >"$T/il.log" 2>&1
check "--img-size 64x4097 refused: each side in [1, 4096]" \
    "[ $? -eq 2 ] && grep -q 'must be in \\[1, 4096\\] a side, got 64x4097' '$T/il.log'" "$(cat "$T/il.log")"
$V info groupmixformer_test --img-size 32x >"$T/ib.log" 2>&1
check "--img-size 32x refused as a malformed size" \
    "[ $? -eq 2 ] && grep -q \"bad value '32x' for --img-size (expected N or HxW\" '$T/ib.log'" "$(cat "$T/ib.log")"
$V forward vit_fmnist_tiny -w "$T/w.safetensors" --input "$T/v2028.safetensors" -o "$T/y2.safetensors" >"$T/fs.log" 2>&1
rc=$?
check "forward: a non-square input to a model whose weights fix the size is refused, saying why (and that timm's \
(H, W) img_size is the way)" \
    "[ $rc -eq 1 ] && grep -q 'takes 28×28 inputs, not 28×20: its weights depend on the image size (vit family); \
build it with --img-size 28x20' '$T/fs.log'" \
    "rc $rc: $(cat "$T/fs.log")"
$V init vit_fmnist_tiny --img-size 28x20 -o "$T/w2820.safetensors" >/dev/null 2>&1 &&
    $V forward vit_fmnist_tiny -w "$T/w2820.safetensors" --input "$T/v2028.safetensors" -o "$T/y2.safetensors" \
    >"$T/fs2.log" 2>&1
check "... and weights made at 28x20 (pos_embed of 7x5 patches) take it" "[ $? -eq 0 ]" "$(cat "$T/fs2.log")"
$V forward vit_fmnist_tiny -w "$T/w.safetensors" --input "$T/v20.safetensors" -o "$T/y2.safetensors" >"$T/f2.log" 2>&1
rc=$?
check "forward: a fixed-size model refuses another input size, saying why" \
    "[ $rc -eq 1 ] && grep -q 'vit_fmnist_tiny takes 28×28 inputs, not 20×20: its weights depend on the image size' '$T/f2.log'" \
    "rc $rc: $(cat "$T/f2.log")"
$V forward vit_fmnist_tiny -w "$T/w.safetensors" --input "$T/v3.safetensors" -o "$T/y3.safetensors" >"$T/f3.log" 2>&1
rc=$?
check "forward: ... and at a size no weights can be made for, it says why instead of suggesting --img-size 3" \
    "[ $rc -eq 1 ] && grep -q 'not 3×3 (its weights depend on the image size, and that size does not fit it: .*patch' '$T/f3.log' && ! grep -q 'img-size 3' '$T/f3.log'" \
    "rc $rc: $(cat "$T/f3.log")"
$V predict groupmixformer_test -w "$T/g.safetensors" --img-size 32 --output "$T/pg.safetensors" "$T/p00.png" \
    >"$T/pg.log" 2>&1
rc=$?
r=$($PY -c "import sys; sys.path.insert(0, 'tests/reference'); import st; print(tuple(st.load('$T/pg.safetensors')['input'].shape))" 2>&1)
check "predict: --img-size on a model whose weights fit any size" "[ $rc -eq 0 ] && [ '$r' = '(1, 3, 32, 32)' ]" \
    "rc $rc: $r $(cat "$T/pg.log")"
$V predict vit_fmnist_tiny -w "$T/w.safetensors" --img-size 20 "$T/p00.png" >"$T/pv.log" 2>&1
rc=$?
check "predict: another --img-size on a fixed-size model names the size the weights were made at" \
    "[ $rc -eq 1 ] && grep -q 'pos_embed (file (1, 50, 64) vs model (1, 26, 64)) (its pos_embed holds a 7x7 grid of \
positions: weights made at --img-size 28)' '$T/pv.log'" "rc $rc: $(cat "$T/pv.log")"
# ... and at the named size too: a file made at 28x20 without its record (a converted checkpoint) given no --img-size
rerecord "$T/w2820.safetensors" "$T/w2820p.safetensors" vitc_model vitc_model_options
$V predict vit_fmnist_tiny -w "$T/w2820p.safetensors" "$T/p00.png" >"$T/pv2.log" 2>&1
rc=$?
check "predict: weights of another size at the named one: the note names the size dependence and --img-size" \
    "[ $rc -eq 1 ] && grep -q 'pos_embed (file (1, 36, 64) vs model (1, 50, 64)) (vit_fmnist_tiny.s weights depend \
on the image size: these may be made at another size than 28: --img-size)' '$T/pv2.log'" "rc $rc: $(cat "$T/pv2.log")"
# ... nor where the file holds a tensor the model lacks at any size (a distilled DeiT's dist_token: 198 tokens)
$PY -c "import sys, numpy as np; sys.path.insert(0, 'tests/reference'); import st
d = st.load(sys.argv[1]); d['dist_token'] = np.zeros((1, 1, 64), np.float32); d['pos_embed'] = np.zeros((1, 51, 64), np.float32)
st.save(sys.argv[2], d)" "$T/w.safetensors" "$T/wdist.safetensors"
$V predict vit_fmnist_tiny -w "$T/wdist.safetensors" "$T/p00.png" >"$T/pd.log" 2>&1
rc=$?
check "predict: a file with a tensor the model lacks: the mismatch named, no --img-size hint" \
    "[ $rc -eq 1 ] && grep -q 'unexpected: dist_token' '$T/pd.log' && ! grep -q 'img-size' '$T/pd.log'" \
    "rc $rc: $(cat "$T/pd.log")"
# ... and a distilled DeiT's, its dist_token and second head dropped (--drop): the extra position row named, no hint
$PY -c "import sys, numpy as np; sys.path.insert(0, 'tests/reference'); import st
d = st.load(sys.argv[1]); d['pos_embed'] = np.zeros((1, 51, 64), np.float32); st.save(sys.argv[2], d)" \
    "$T/w.safetensors" "$T/wdist2.safetensors"
$V predict vit_fmnist_tiny -w "$T/wdist2.safetensors" "$T/p00.png" >"$T/pd2.log" 2>&1
rc=$?
check "predict: a distilled DeiT's pos_embed (one more token) is named as such, no --img-size hint" \
    "[ $rc -eq 1 ] && grep -q 'holds a 7x7 grid and one more token than vit_fmnist_tiny.s: a distilled DeiT.s \
distillation token' '$T/pd2.log' && ! grep -q 'img-size' '$T/pd2.log'" "rc $rc: $(cat "$T/pd2.log")"
# ... and on a model without a class token, a row more than a square grid is named as a class token's
$V init vit_fmnist_tiny_gap -o "$T/gap.safetensors" >/dev/null 2>&1
$PY -c "import sys, numpy as np; sys.path.insert(0, 'tests/reference'); import st
d = st.load(sys.argv[1]); d['pos_embed'] = np.zeros((1, 50, 80), np.float32); st.save(sys.argv[2], d)" \
    "$T/gap.safetensors" "$T/gap50.safetensors"
$V predict vit_fmnist_tiny_gap -w "$T/gap50.safetensors" "$T/p00.png" >"$T/pg50.log" 2>&1
rc=$?
check "predict: a class token's pos_embed row on a pooling model is named as such" "[ $rc -eq 1 ] && \
    grep -q 'holds a 7x7 grid and a class token.s row, which vit_fmnist_tiny_gap, pooling its tokens, does not have' \
    '$T/pg50.log'" "rc $rc: $(cat "$T/pg50.log")"
# a classifier for another class count, in a file without its record (a fine-tuned checkpoint, converted): named,
# also where the file leaves out the buffers a file may omit (Swin's relative_position_index and attn_mask)
$V init vit_fmnist_tiny --num-classes 4 -o "$T/w4r.safetensors" >/dev/null 2>&1
rerecord "$T/w4r.safetensors" "$T/w4.safetensors" vitc_model vitc_model_options
$V init swin_fmnist_tiny --num-classes 4 -o "$T/s4r.safetensors" >/dev/null 2>&1
$PY -c "import sys; sys.path.insert(0, 'tests/reference'); import st
d = {k: v for k, v in st.load(sys.argv[1]).items() if 'relative_position_index' not in k and 'attn_mask' not in k}
st.save(sys.argv[2], d)" "$T/s4r.safetensors" "$T/s4.safetensors"
for mw in vit_fmnist_tiny:w4 swin_fmnist_tiny:s4; do
    $V predict "${mw%%:*}" -w "$T/${mw#*:}.safetensors" "$T/p00.png" >"$T/p4.log" 2>&1
    rc=$?
    check "predict ${mw%%:*}: a classifier for 4 classes: the note names the count and --num-classes 4" \
        "[ $rc -eq 1 ] && grep -q 'its classifier is made for 4 classes, the model.s for 10: --num-classes 4)' \
        '$T/p4.log' && ! grep -q 'img-size' '$T/p4.log'" "rc $rc: $(cat "$T/p4.log")"
    $V predict "${mw%%:*}" --num-classes 4 -w "$T/${mw#*:}.safetensors" "$T/p00.png" >"$T/p4n.log" 2>&1
    check "... and with --num-classes 4 it loads" "[ $? -eq 0 ]" "$(cat "$T/p4n.log")"
done
# ... but not where what differs does not depend on the size (a file of other heads, at the size it was made at)
$V init swin_fmnist_tiny --img-size 56 --heads 1,2 -o "$T/shr.safetensors" >/dev/null 2>&1
rerecord "$T/shr.safetensors" "$T/sh.safetensors" vitc_model vitc_model_options # not built from the record
$V predict swin_fmnist_tiny -w "$T/sh.safetensors" --img-size 56 "$T/p00.png" >"$T/sh.log" 2>&1
rc=$?
check "predict: a heads mismatch at another --img-size is not blamed on the size" \
    "[ $rc -eq 1 ] && grep -q 'relative_position_bias_table' '$T/sh.log' && ! grep -q 'depend on the image size' '$T/sh.log'" \
    "rc $rc: $(cat "$T/sh.log")"
# CSwin's weights fit any size (LePE is a convolution): forward takes a 448-px input with 224-px weights; a size its
# stripes do not divide is refused saying so, not blamed on the weights
CSW="cswin_tiny_224 --dims 16 --depths 1 --heads 2 --num-classes 4"
$V init $CSW -o "$T/csw.safetensors" >/dev/null 2>&1
/usr/bin/python3 -c "import sys; sys.path.insert(0, 'tests/reference'); import st, numpy as np; \
[st.save('$T/cx%d.safetensors' % s, {'input': np.random.rand(1, 3, s, s).astype(np.float32)}) for s in (448, 64)]; \
st.save('$T/cx224x448.safetensors', {'input': np.random.rand(1, 3, 224, 448).astype(np.float32)})"
$V forward $CSW -w "$T/csw.safetensors" --input "$T/cx448.safetensors" -o "$T/cy.safetensors" >"$T/cs448.log" 2>&1
check "CSwin forward takes a 448-px input with 224-px weights" "[ $? -eq 0 ] && [ -s '$T/cy.safetensors' ]" "$(cat "$T/cs448.log")"
$V forward $CSW -w "$T/csw.safetensors" --input "$T/cx64.safetensors" -o "$T/cy.safetensors" >"$T/cs64.log" 2>&1
check "... and refuses 64 px, where stripes of 7 do not divide stage 3's grid" \
    "[ $? -eq 1 ] && grep -q 'stripe width 7 does not divide the stage resolution 4' '$T/cs64.log'" "$(cat "$T/cs64.log")"
$V forward $CSW -w "$T/csw.safetensors" --input "$T/cx224x448.safetensors" -o "$T/cy.safetensors" >"$T/csn.log" 2>&1
check "... and refuses a non-square input, as its official blocks (H = W = sqrt(L))" \
    "[ $? -eq 1 ] && grep -q 'input 224x448: CSwin takes square inputs only' '$T/csn.log'" "$(cat "$T/csn.log")"
# info names each stage's window or stripe width, as --windows set it
$V info cswin_tiny_224 --windows 1,2,14,7 >"$T/iw.log" 2>&1
check "info shows the stripe widths --windows gives" \
    "[ $? -eq 0 ] && grep -q '^stage 1 .*, window 1$' '$T/iw.log' && grep -q '^stage 3 .*, window 14$' '$T/iw.log'" \
    "$(cat "$T/iw.log")"
$V info cswin_tiny_224 --img-size 448 >"$T/iw2.log" 2>&1
$V info flatten_swin_tiny --json >"$T/iw3.json" 2>&1
check "... and the one a stage runs where they differ (CSwin's global last stage, a Swin window covering the map)" \
    "grep -q '^stage 4 .*, window 7 (runs 14)$' '$T/iw2.log' && grep -q '\"window\": 56, \"window_run\": 28' '$T/iw3.json'" \
    "$(cat "$T/iw2.log" "$T/iw3.json")"
check "info --json: embed_dim and num_heads the first stage's (timm's), num_features the last stage's width" \
    "grep -q '\"embed_dim\": 96, \"num_features\": 768, \"depth\": 12, \"num_heads\": 3,' '$T/iw3.json'" "$(cat "$T/iw3.json")"
# busy cores: bench (and train) warn when other runnable threads leave fewer cores than vitc's threads, unless
# OMP_WAIT_POLICY is set (make test sets it: its parts run side by side)
if [ "$(nproc)" -ge 2 ]; then
    busy=()
    for _ in $(seq "$(nproc)"); do timeout 60 sh -c 'while :; do :; done' & busy+=($!); done
    sleep 0.3
    env -u OMP_WAIT_POLICY $V bench vit_fmnist_tiny --batch-size 2 --iters 1 --threads 2 >/dev/null 2>"$T/busy.err"
    check "bench warns when every core is busy with other threads, naming the remedies" \
        "[ $? -eq 0 ] && grep -q 'warning: .* running on this machine.* give --threads 1, or set OMP_WAIT_POLICY=passive' '$T/busy.err'" \
        "$(cat "$T/busy.err")"
    env -u OMP_WAIT_POLICY $V train vit_fmnist_tiny --recipe bogus --out "$T/busyrun" >/dev/null 2>"$T/busyt.err"
    check "... but train's usage error is said alone, without the warning" \
        "[ $? -eq 2 ] && [ \$(wc -l <'$T/busyt.err') -eq 1 ] && grep -q 'unknown recipe' '$T/busyt.err'" \
        "$(cat "$T/busyt.err")"
    OMP_WAIT_POLICY=passive $V bench vit_fmnist_tiny --batch-size 2 --iters 1 --threads 2 >/dev/null 2>"$T/busy2.err"
    check "... but not with OMP_WAIT_POLICY set" "[ $? -eq 0 ] && ! grep -q 'warning' '$T/busy2.err'" "$(cat "$T/busy2.err")"
    # and after the timed steps, from the CPU time the machine spent beside vitc's own (/proc/stat, getrusage): the
    # competitors shared the cores during the measurement, whatever the wait policy (a thread per core, so that no
    # core is spare for them on any machine)
    n=$(nproc)
    OMP_WAIT_POLICY=passive $V bench vit_fmnist_tiny --batch-size 256 --iters 20 --threads "$n" >"$T/busy3.out" 2>/dev/null
    check "bench reports the CPUs other processes took during its timed steps" \
        "[ $? -eq 0 ] && grep -q '^WARNING: during the timed steps other processes ran on [0-9.]* of this machine.s $n CPUs.* beside vitc.s $n threads' '$T/busy3.out'" \
        "$(cat "$T/busy3.out")"
    OMP_WAIT_POLICY=passive $V bench vit_fmnist_tiny --batch-size 256 --iters 20 --threads "$n" --json >"$T/busy4.json" 2>/dev/null
    check "... and --json gives them (other_cpus above a quarter CPU, the warning's text)" \
        "/usr/bin/python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); sys.exit(not (d[\"other_cpus\"] > 0.25 and d[\"steal_cpus\"] >= 0 and d[\"contention_warning\"].startswith(\"during the timed steps\")))' '$T/busy4.json'" \
        "$(cat "$T/busy4.json")"
    # a step of a millisecond is far below /proc/stat's tick counts: unknown (null), never a warning from rounding
    OMP_WAIT_POLICY=passive $V bench vit_fmnist_tiny --batch-size 2 --iters 1 --threads "$n" --json >"$T/busy5.json" 2>/dev/null
    check "... but not from timed steps too short for the clock ticks" \
        "/usr/bin/python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); sys.exit(not (d[\"other_cpus\"] is None and d[\"contention_warning\"] is None))' '$T/busy5.json'" \
        "$(cat "$T/busy5.json")"
    kill "${busy[@]}" 2>/dev/null
    wait "${busy[@]}" 2>/dev/null || true # killed by TERM: not the script's status
fi
