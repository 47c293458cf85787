#!/usr/bin/env bash
# Image-folder training (issue 11): a small ImageFolder of Fashion-MNIST (2,000 train / 500 val, PNG and JPEG) made
# by tools/make_imagefolder.py; checks that decoded PNG pixels equal the IDX pixels, that training on the PNG folder
# gives the same losses and bit-identical weights as training on IDX files holding the same images in torchvision
# ImageFolder's order (tests/cli/folder_ref.py), that JPEG training lowers the loss, that corrupt and truncated files
# are skipped with one warning each and counted, that 1 and 3 loader threads give the same run, classes.json, eval
# with top-5, a 3-channel model on grayscale PNGs, the pipeline benchmark, and the folder errors.
. "$(dirname "$0")/lib.sh"
V=./vitc
PY=/usr/bin/python3
make_test_imagefolder
# make_imagefolder.py refuses counts it cannot honour and a folder holding an earlier run's images
mk() { /usr/bin/python3 tools/make_imagefolder.py "$@" >"$T/mk2.log" 2>&1; }
mk synthetic "$T/mk0" --classes 0
check "make_imagefolder.py: --classes 0 refused" \
    "[ $? -eq 2 ] && grep -q -- '--classes must be at least 1' '$T/mk2.log'" "$(cat "$T/mk2.log")"
mk fmnist "$T/mk1" --train 60001 --val 1
check "... a --train past the split's images" \
    "[ $? -eq 1 ] && grep -q 'the train split has 60000 images' '$T/mk2.log'" "$(cat "$T/mk2.log")"
mk fmnist "$T/mk3" --train 2000 --val 8
check "... counts that leave a class folder empty (which vitc train refuses), before writing anything" \
    "[ $? -eq 1 ] && grep -q -- '--val 8: the first 8 images of the t10k split hold no image of classes 0_tshirt, ' \
     '$T/mk2.log' && [ ! -e '$T/mk3' ]" "$(cat "$T/mk2.log")"
mk synthetic "$T/mk4" --n 20 --classes 10
check "... a synthetic --n that leaves classes without a validation image" \
    "[ $? -eq 2 ] && grep -q -- 'give --n at least 50 for 10 classes' '$T/mk2.log' && [ ! -e '$T/mk4' ]" \
    "$(cat "$T/mk2.log")"
mk fmnist "$F" --train 1 --val 1
check "... an existing folder with images in it" "[ $? -eq 2 ] && grep -q 'exists and is not empty' '$T/mk2.log'" \
    "$(cat "$T/mk2.log")"
$PY tests/cli/folder_ref.py idx "$F/png" "${VITC_FMNIST_DIR:-/usr/share/datasets/fashion-mnist}" "$T/idx" \
    >"$T/idx.log" 2>&1
check "torchvision ImageFolder order written as IDX" "[ -s '$T/idx/train-images-idx3-ubyte.gz' ]" "$(tail -3 "$T/idx.log")"

ONE=$(find "$F/png/val" -name '*.png' | sort | head -n 1)

# decoded PNG pixels = IDX pixels: vitc predict --output holds the preprocessed inputs (crop_pct 1: x/255 normalised)
$V init vit_fmnist_tiny -o "$T/w.safetensors" >/dev/null 2>&1
mkdir -p "$T/pix"
find "$F/png/val" -type f \( -iname '*.png' \) | sort | head -n 200 >"$T/pix/images.txt"
$V predict vit_fmnist_tiny -w "$T/w.safetensors" --output "$T/pix/x.safetensors" $(cat "$T/pix/images.txt") \
    >/dev/null 2>"$T/pix.log"
$PY tests/cli/folder_ref.py pixels "$T/pix/x.safetensors" "${VITC_FMNIST_DIR:-/usr/share/datasets/fashion-mnist}" \
    0.2860 0.3530 200 >"$T/pixcheck.log" 2>&1
cat "$T/pixcheck.log" | grep -E '^(PASS|FAIL)' || bad "pixel check ran" "$(tail -n 3 "$T/pixcheck.log" "$T/pix.log")"

# eval on a folder of large JPEGs sees the pixels predict (and PIL) sees: its loss equals the cross-entropy of
# predict's logits (eval had decoded JPEGs scaled in the DCT domain, a loss off by 2e-4 on 400x300 images)
$PY - "$T/big" <<'PYEOF'
import os, sys
import numpy as np
from PIL import Image
rng = np.random.default_rng(4)
for split in ("train", "val"):
    for c in ("a", "b"):
        os.makedirs(f"{sys.argv[1]}/{split}/{c}", exist_ok=True)
        x = np.cumsum(rng.integers(-9, 10, (300, 400, 3)), axis=1) % 256  # smooth rows: DCT scaling changes them
        Image.fromarray(x.astype(np.uint8)).save(f"{sys.argv[1]}/{split}/{c}/0.jpg", quality=90)
PYEOF
BIG="vit_fmnist_tiny --in-chans 3 --img-size 32 --num-classes 2"
$V init $BIG -o "$T/big.safetensors" >/dev/null 2>&1
$V eval $BIG -w "$T/big.safetensors" --data "$T/big" --json >"$T/big_eval.json" 2>"$T/big_eval.err"
$V predict $BIG -w "$T/big.safetensors" --output "$T/big_pred.safetensors" "$T/big/val/a/0.jpg" "$T/big/val/b/0.jpg" \
    >/dev/null 2>>"$T/big_eval.err"
r=$($PY - "$T/big_eval.json" "$T/big_pred.safetensors" <<'PYEOF' 2>&1
import json, sys
sys.path.insert(0, "tests/reference")
import numpy as np
import st
ev, z = json.load(open(sys.argv[1])), st.load(sys.argv[2])["logits"].astype(np.float64)
z = z - z.max(1, keepdims=True)
loss = float(np.mean(np.log(np.exp(z).sum(1)) - z[[0, 1], [0, 1]]))
print(("ok" if abs(loss - ev["loss"]) <= 2e-6 else "bad") + f" eval {ev['loss']:.6f}, predict's logits {loss:.6f}")
PYEOF
)
check "eval on 400x300 JPEGs: the loss of predict's logits" "[ \"\${r%% *}\" = ok ]" "$r $(cat "$T/big_eval.err")"
# the training loop evaluates in batches of the training batch, at most the validation images: a fixed 250 had a
# 384 px run at batch 1 peak at 2 GB computing 250 images for the 2 it validates
$V train deit_tiny_patch16_224 --depths 1 --img-size 384 --num-classes 2 --data "$T/big" --epochs 1 --batch-size 1 \
    --threads 1 --out "$T/big_run" >"$T/big_run.log" 2>&1
peak=$(sed -n 's/.*peak memory \([0-9]*\).*/\1/p' "$T/big_run.log")
check "a 384 px run at batch 1 validates in small batches (peak ${peak:-?} MiB, under 400)" \
    "[ -n '$peak' ] && [ '${peak:-9999}' -lt 400 ]" "$(tail -3 "$T/big_run.log")"
# eval of a val/ folder alone takes the classes.json beside the weights (the run's order): the scores of the whole folder
mkdir -p "$T/vonly" && cp -r "$T/big/val" "$T/vonly/"
$V eval deit_tiny_patch16_224 -w "$T/big_run/weights.safetensors" --data "$T/vonly" --json >"$T/vonly.json" 2>"$T/vonly.err"
rc=$?
$V eval deit_tiny_patch16_224 -w "$T/big_run/weights.safetensors" --data "$T/big" --json >"$T/vall.json" 2>/dev/null
check "eval of a val/ folder alone: the run's classes.json, the whole folder's scores" "[ $rc -eq 0 ] && \
    grep -q 'class names from .*big_run/classes.json' '$T/vonly.err' && \
    [ \"\$(sed 's/.*\"images\"//' '$T/vonly.json')\" = \"\$(sed 's/.*\"images\"//' '$T/vall.json')\" ]" \
    "rc $rc: $(cat "$T/vonly.err" "$T/vonly.json" "$T/vall.json")"

# a GroupMixFormer run whose checkpoint records --heads 4 (accepted, and ignored by GMA's 8 heads, before --heads was
# refused on GMA stages; here spelt --heads=4) still resumes: recorded heads are dropped where the attention type runs
# its own
$V train groupmixformer_test --data "$F/png" --img-size 32 --in-chans 1 --num-classes 10 --train-subset 64 \
    --test-subset 32 --epochs 1 --batch-size 32 --out "$T/gh" >"$T/gh.log" 2>&1
$PY - "$T/gh/checkpoint.safetensors" <<'PYEOF'
import json, struct, sys
p = sys.argv[1]
b = open(p, "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
h["__metadata__"]["model-options"] += " --heads=4"  # the form the library's reader takes too
hb = json.dumps(h).encode()
hb += b" " * (-len(hb) % 8)
open(p, "wb").write(struct.pack("<Q", len(hb)) + hb + b[8 + n:])
PYEOF
$V train groupmixformer_test --resume "$T/gh" --epochs 2 >"$T/ghr.log" 2>&1
check "a GMA run recording --heads 4 resumes" "[ $? -eq 0 ] && [ \$(wc -l <'$T/gh/metrics.csv') -eq 3 ]" \
    "$(tail -n 3 "$T/gh.log" "$T/ghr.log")"
$V info groupmixformer_test --heads 4 >"$T/ghi.log" 2>&1
check "... while --heads 4 given on a GMA model is refused (2)" "[ $? -eq 2 ] && grep -q 'always runs 8 heads' '$T/ghi.log'" \
    "$(cat "$T/ghi.log")"

# a non-square model (GroupMixFormer takes H != W, as its official code does): training reads H x W crops (crop +
# flip: the image scaled to cover them; the DeiT recipe: RandomResizedCrop to the tuple size), and eval, predict and
# attention the eval transform's H x W; the run's weights record the size, so each builds the model so
$V train groupmixformer_test --data "$F/png" --img-size 32x64 --in-chans 1 --num-classes 10 --train-subset 64 \
    --test-subset 32 --epochs 1 --batch-size 32 --out "$T/nsq" >"$T/nsq.log" 2>&1
check "train at 32x64 (crop + flip)" "[ $? -eq 0 ] && [ \$(wc -l <'$T/nsq/metrics.csv') -eq 2 ]" \
    "$(tail -n 5 "$T/nsq.log")"
$V train groupmixformer_test --data "$F/jpg" --img-size 64x32 --num-classes 10 --train-subset 64 --test-subset 32 \
    --epochs 1 --batch-size 32 --recipe deit --no-repeated-aug --out "$T/nsqd" >"$T/nsqd.log" 2>&1
check "train at 64x32 with --recipe deit (its transform at 64x32)" \
    "[ $? -eq 0 ] && grep -q 'Train transform: DeiT size=64x32 ' '$T/nsqd.log'" "$(tail -n 5 "$T/nsqd.log")"
$V eval groupmixformer_test -w "$T/nsqd/weights.safetensors" --data "$F/jpg" --test-subset 32 --json \
    >"$T/nsqe.json" 2>"$T/nsqe.err"
r=$($PY -c "import json; j = json.load(open('$T/nsqe.json')); print(j['images'])" 2>&1)
check "... eval of its weights at 64x32 (the record builds the model so)" "[ '$r' = 32 ]" \
    "$r $(cat "$T/nsqe.err" "$T/nsqe.json")"
IMG="$F/jpg/val/0_tshirt/$(ls "$F/jpg/val/0_tshirt" | head -1)"
$V attention groupmixformer_test -w "$T/nsqd/weights.safetensors" "$IMG" -o "$T/nsq.png" \
    --save-maps "$T/nsqm.safetensors" >"$T/nsqa.log" 2>&1
rc=$?
r=$($PY -c "import sys; sys.path.insert(0, 'tests/reference'); import st
print(tuple(st.load('$T/nsqm.safetensors')['input'].shape), open('$T/nsq.png', 'rb').read(4) == b'\x89PNG')" 2>&1)
check "... attention draws it: inputs (1, 3, 64, 32), a PNG written" \
    "[ $rc -eq 0 ] && [ '$r' = '(1, 3, 64, 32) True' ]" \
    "rc $rc: $r $(cat "$T/nsqa.log")"

# fine-tuning square weights at 28x44 (timm's (H, W) img_size): pos_embed resized to the 7x11 patch grid
$V init vit_fmnist_tiny -o "$T/sq.safetensors" >/dev/null 2>&1
$V train vit_fmnist_tiny --img-size 28x44 --init-from "$T/sq.safetensors" --data "$F/png" --epochs 1 --train-subset 64 \
    --test-subset 32 --batch-size 32 --out "$T/ft44" >"$T/ft44.log" 2>&1
check "--init-from into a 28x44 ViT: pos_embed resized to its 7x11 grid" \
    "[ $? -eq 0 ] && grep -q 'pos_embed resized bicubically from a 7×7 to a 7×11 grid' '$T/ft44.log'" \
    "$(tail -n 5 "$T/ft44.log")"

COMMON="vit_fmnist_tiny --batch-size 64 --lr 2e-3 --seed 5 --log-every 1000 --epochs 1"
$V train $COMMON --data "$F/png" --workers 3 --out "$T/png" >"$T/png.log" 2>&1
check "training on the PNG folder runs" "[ $? -eq 0 ] && [ -s '$T/png/metrics.csv' ]" "$(tail -3 "$T/png.log")"
VITC_FMNIST_DIR="$T/idx" $V train $COMMON --data fashion-mnist --workers 1 --out "$T/idx-run" >"$T/idxrun.log" 2>&1
check "training on the same images as IDX runs" "[ -s '$T/idx-run/metrics.csv' ]" "$(tail -3 "$T/idxrun.log")"
check "PNG folder and IDX give the same losses and accuracies" \
    "diff <(cut -d, -f1-6,10 '$T/png/metrics.csv') <(cut -d, -f1-6,10 '$T/idx-run/metrics.csv') >/dev/null" \
    "$(cat "$T/png/metrics.csv" "$T/idx-run/metrics.csv")"
check "PNG folder and IDX give bit-identical weights (3 vs 1 loader threads); only the folder's records vitc_data" \
    "$PY -c 'import sys; sys.path.insert(0, \"tests/reference\"); import st, numpy as np
a, b = (st.load(sys.argv[i]) for i in (1, 2))
ma, mb = (st.parse(open(sys.argv[i], \"rb\").read())[0][\"__metadata__\"] for i in (1, 2))
sys.exit(not (a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a) and
              ma.pop(\"vitc_data\", None) == \"folder\" and \"vitc_data\" not in mb and ma == mb))' \
     '$T/png/weights.safetensors' '$T/idx-run/weights.safetensors'"
# the same images as the other kind of data (Fashion-MNIST's files or a folder): a resume changing kind is refused
for r in "png:fashion-mnist" "idx-run:$F/png"; do
    VITC_FMNIST_DIR="$T/idx" $V train vit_fmnist_tiny --resume "$T/${r%%:*}" --epochs 2 --data "${r#*:}" \
        >"$T/kind.log" 2>&1
    check "a resume of $T/${r%%:*} on ${r#*:} (the other kind of data) is refused, naming both" \
        "[ $? -eq 1 ] && grep -q 'the run trained on .*, not on .*${r#*:}: resume with the run.s data' \
         '$T/kind.log' && [ \$(wc -l <'$T/${r%%:*}/metrics.csv') -eq 2 ]" "$(tail -3 "$T/kind.log")"
done
check "classes.json maps index to class folder" \
    "$PY -c 'import json,sys; d=json.load(open(\"$T/png/classes.json\")); sys.exit(not (len(d)==10 and d[\"0\"]==\"0_tshirt\" and d[\"9\"]==\"9_boot\"))'"
check "the epoch prints top-5" "grep -q 'Acc@5: ' '$T/png.log'"
check "metrics.csv has test_acc5" "head -1 '$T/png/metrics.csv' | grep -q ',test_acc5$'"

$V eval vit_fmnist_tiny -w "$T/png/weights.safetensors" --data "$F/png" >"$T/ev.log" 2>&1
check "eval on the folder's val split prints top-1 and top-5" \
    "grep -Eq 'on validation .*\(500 images\): loss [0-9.]+, top-1 accuracy [0-9.]+%, top-5 accuracy [0-9.]+%' '$T/ev.log'" \
    "$(cat "$T/ev.log")"
a1=$(sed -n 2p "$T/png/metrics.csv" | cut -d, -f6)
check "eval agrees with the run's last evaluation" \
    "grep -q \"top-1 accuracy $($PY -c "print('%.2f' % (100 * $a1))")%\" '$T/ev.log'" "$a1 vs $(cat "$T/ev.log")"

$V predict vit_fmnist_tiny -w "$T/png/weights.safetensors" --classes "$T/png/classes.json" --topk 10 --json "$ONE" \
    >"$T/pred.log" 2>&1
check "predict --classes names the folder's classes" \
    "grep -q '\"name\": \"9_boot\"' '$T/pred.log' && grep -q '\"name\": \"0_tshirt\"' '$T/pred.log'" "$(cat "$T/pred.log")"
# the weights record that a folder trained them (metadata vitc_data): copied away from classes.json, predict shows
# classes by number, not Fashion-MNIST's names for a 10-class 28x28 model, and says why
mkdir -p "$T/away" && cp "$T/png/weights.safetensors" "$T/away/w.safetensors"
$V predict vit_fmnist_tiny -w "$T/away/w.safetensors" --topk 10 "$ONE" >"$T/away.log" 2>"$T/away.err"
check "weights trained on a folder, away from its classes.json: no dataset names, a notice" \
    "[ $? -eq 0 ] && grep -q '10\\. class ' '$T/away.log' && ! grep -qi 'trouser' '$T/away.log' && grep -q \
     'w.safetensors was trained on an image folder (metadata vitc_data)' '$T/away.err'" \
    "$(cat "$T/away.log" "$T/away.err")"
$PY -c 'import json, sys; json.dump({str(k): "c%d" % k for k in range(10)}, open(sys.argv[1], "w"))' "$T/other.json"
$V eval vit_fmnist_tiny -w "$T/png/weights.safetensors" --data "$F/png" --classes "$T/other.json" >"$T/ev2.log" 2>&1
rc=$?
check "eval --classes refuses a folder with other classes" \
    "[ $rc -eq 1 ] && grep -q \"class folder $F/png/val/0_tshirt has no counterpart in the training classes\" '$T/ev2.log'" \
    "rc $rc: $(cat "$T/ev2.log")"
# with --classes, eval needs only val/ (a held-out folder), its class folders scored by name: the same accuracy
mkdir -p "$T/valonly"
cp -r "$F/png/val" "$T/valonly/"
$V eval vit_fmnist_tiny -w "$T/png/weights.safetensors" --data "$T/valonly" --classes "$T/png/classes.json" \
    >"$T/ev3.log" 2>&1
check "eval --classes on a folder with only val/ scores it by the class names, as with train/ there" \
    "[ $? -eq 0 ] && diff <(grep -o 'top-1 accuracy.*' '$T/ev.log') <(grep -o 'top-1 accuracy.*' '$T/ev3.log')" \
    "$(cat "$T/ev.log" "$T/ev3.log")"
# .tif, .tiff and .webp files (torchvision reads them, vitc does not decode them) are left out and counted
printf 'II*\0' >"$T/valonly/val/0_tshirt/x.tif"
printf 'RIFF' >"$T/valonly/val/0_tshirt/y.WebP"
$V eval vit_fmnist_tiny -w "$T/png/weights.safetensors" --data "$T/valonly" --classes "$T/png/classes.json" \
    >"$T/ev5.log" 2>&1
check "eval says how many .tif/.tiff/.webp files it left out, and scores the rest" \
    "[ $? -eq 0 ] && grep -q '2 files of $T/valonly/val left out: .tif, .tiff and .webp' '$T/ev5.log' && \
    diff <(grep -o 'top-1 accuracy.*' '$T/ev.log') <(grep -o 'top-1 accuracy.*' '$T/ev5.log')" "$(cat "$T/ev5.log")"
# with train/, eval labels by the folder's class order: weights whose run's classes.json orders them otherwise are
# refused (a silently wrong accuracy before); --classes then scores by the weights' names
mkdir -p "$T/swapped"
cp "$T/png/weights.safetensors" "$T/swapped/"
$PY -c 'import json, sys; d = json.load(open(sys.argv[1])); d["0"], d["1"] = d["1"], d["0"]
json.dump(d, open(sys.argv[2], "w"))' "$T/png/classes.json" "$T/swapped/classes.json"
$V eval vit_fmnist_tiny -w "$T/swapped/weights.safetensors" --data "$F/png" >"$T/ev4.log" 2>&1
rc=$?
check "eval refuses a folder whose classes the weights' classes.json orders otherwise" \
    "[ $rc -eq 1 ] && grep -q \"$F/png/train's classes are not those of the weights: class 0 is '0_tshirt' in \
$F/png/train and '1_trouser' in $T/swapped/classes.json\" '$T/ev4.log'" "rc $rc: $(cat "$T/ev4.log")"

# JPEG: runs and lowers the loss (two epochs on a subset)
$V train vit_fmnist_tiny --batch-size 64 --lr 2e-3 --seed 5 --log-every 1000 --epochs 2 --data "$F/jpg" \
    --out "$T/jpg" >"$T/jpg.log" 2>&1
l1=$(sed -n 2p "$T/jpg/metrics.csv" 2>/dev/null | cut -d, -f3)
l2=$(sed -n 3p "$T/jpg/metrics.csv" 2>/dev/null | cut -d, -f3)
check "JPEG training lowers the loss (${l1:-?} -> ${l2:-?})" "[ -n '$l2' ] && awk 'BEGIN{exit !($l2 < $l1)}'" \
    "$(tail -3 "$T/jpg.log")"

# a 3-channel model reads grayscale PNGs as PIL "RGB"
$V train vit_fmnist_tiny --in-chans 3 --batch-size 64 --train-subset 256 --test-subset 64 --epochs 1 \
    --data "$F/png" --out "$T/rgb" >"$T/rgb.log" 2>&1
check "a 3-channel model trains on grayscale PNGs" "[ $? -eq 0 ] && grep -q '^Done' '$T/rgb.log'" "$(tail -3 "$T/rgb.log")"

# corrupt and truncated files: skipped, one warning each (over two epochs), counted at each epoch end
mkdir -p "$T/bad"
cp -r "$F/png/train" "$F/png/val" "$T/bad/"
# two of the images --train-subset 640 takes (files ⌊i·n/640⌋ in class order): the first, and class 1's first
all=$(find "$T/bad/train" -type f -iname '*.png' | sort)
b1=$(echo "$all" | head -n 1)
b2=$(echo "$all" | awk -v n="$(echo "$all" | wc -l)" '{ a[NR - 1] = $0 }
    END { for (i = 0; i < 640; i++) { f = a[int(i * n / 640)]; if (f ~ /1_trouser/) { print f; exit } } }')
b3=$(find "$T/bad/val/2_pullover" -name '*.png' | sort | sed -n 2p)
head -c 100 "$b1" >"$T/trunc" && mv "$T/trunc" "$b1"
echo "this is not a PNG" >"$b2"
head -c 60 "$b3" >"$T/trunc" && mv "$T/trunc" "$b3"
$V train vit_fmnist_tiny --batch-size 64 --lr 2e-3 --seed 5 --log-every 1000 --epochs 2 --train-subset 640 \
    --data "$T/bad" --out "$T/badrun" >"$T/bad.log" 2>&1
check "training with corrupt files finishes" "[ $? -eq 0 ]" "$(tail -3 "$T/bad.log")"
for f in "$b1" "$b2" "$b3"; do
    check "one warning naming $(basename "$(dirname "$f")")/$(basename "$f")" \
        "[ \$(grep -c 'warning: skipping unreadable image.*$f' '$T/bad.log') -eq 1 ]" "$(grep -F "$f" "$T/bad.log")"
done
check "skipped files counted at each epoch end" \
    "[ \$(grep -c '^Skipped 2 unreadable training images this epoch' '$T/bad.log') -eq 2 ] && grep -q '^Skipped 1 unreadable validation image$' '$T/bad.log'" \
    "$(grep -i skipped "$T/bad.log")"
# a run stopped 8 steps into epoch 1 (of 10) counts that epoch's skipped files whole once resumed: its checkpoint
# holds those of the part trained (here at least one), and the resume ends with the uninterrupted run's weights
$V train vit_fmnist_tiny --batch-size 64 --lr 2e-3 --seed 5 --log-every 1000 --epochs 2 --train-subset 640 \
    --data "$T/bad" --fault-stop-step 17 --out "$T/badstop" >"$T/badstop.log" 2>&1
rc=$?
part=$(meta "$T/badstop/checkpoint.safetensors" part_skipped 2>/dev/null)
$V train vit_fmnist_tiny --resume "$T/badstop" >"$T/badstop2.log" 2>&1
check "a stop mid-epoch and its resume count the epoch's skipped files whole" "[ $rc -eq 130 ] && \
    [ '${part:-0}' -ge 1 ] && grep -q '^Skipped 2 unreadable training images this epoch' '$T/badstop2.log' && \
    cmp -s '$T/badrun/weights.safetensors' '$T/badstop/weights.safetensors'" \
    "rc $rc, part_skipped '$part': $(grep -i skipped "$T/badstop2.log")"

mkdir -p "$T/allbad/train/a" "$T/allbad/train/b" "$T/allbad/val/a"
for i in 1 2; do echo junk >"$T/allbad/train/a/$i.png"; done
echo junk >"$T/allbad/train/b/3.png"
cp "$ONE" "$T/allbad/val/a/1.png" # a readable validation image: the training set's check decides
$V train vit_fmnist_tiny --num-classes 2 --batch-size 2 --epochs 1 --data "$T/allbad" --out "$T/allbadrun" \
    >"$T/allbad.log" 2>&1
rc=$?
check "every training file corrupt: a clear error before the run folder is made (it had come at the first batch, the \
run folder written: classes.json and command.txt left behind)" \
    "[ $rc -eq 1 ] && grep -q 'none of the 3 training images of $T/allbad can be read (the first: ' '$T/allbad.log' && \
     [ ! -e '$T/allbadrun' ]" "rc $rc: $(tail -3 "$T/allbad.log")"

# subsets larger than the splits: every image used, and said (not silently capped)
mkdir -p "$T/few/train/a" "$T/few/train/b" "$T/few/val/a" "$T/few/val/b"
for d in train/a/1 train/a/2 train/b/1 train/b/2 val/a/1 val/b/1; do cp "$ONE" "$T/few/$d.png"; done
$V train vit_fmnist_tiny --num-classes 2 --batch-size 2 --epochs 1 --train-subset 100 --test-subset 50 \
    --data "$T/few" --out "$T/fewrun" >"$T/few.log" 2>&1
check "train: subsets above the splits' sizes said in a note, every image used" "[ $? -eq 0 ] && \
grep -q '^Note: --train-subset 100 is more than the 4 training images' '$T/few.log' && \
grep -q '^Note: --test-subset 50 is more than the 2 test images' '$T/few.log'" "$(head -5 "$T/few.log")"
$V eval vit_fmnist_tiny --num-classes 2 -w "$T/fewrun/weights.safetensors" --data "$T/few" --test-subset 50 \
    >"$T/fewe.log" 2>&1
check "eval: the same notice" "[ $? -eq 0 ] && grep -q 'notice: --test-subset 50 is more than the 2 test images' \
'$T/fewe.log' && grep -q '(2 images)' '$T/fewe.log'" "$(cat "$T/fewe.log")"

# folder errors, each naming the folder
$V init vit_fmnist_tiny --num-classes 2 -o "$T/errw2.safetensors" >/dev/null 2>&1
err() { # name, expected message part, folder, extra options...
    local name=$1 want=$2 dir=$3
    shift 3
    $V train vit_fmnist_tiny --epochs 1 --data "$dir" --out "$T/errrun" "$@" >"$T/err.log" 2>&1
    local rc=$?
    check "$name" "[ $rc -eq 1 ] && grep -qF -- '$want' '$T/err.log'" "rc $rc: $(cat "$T/err.log")"
}
mkdir -p "$T/e1/val/a" "$T/e2/train/a" "$T/e3/train/a" "$T/e3/train/b" "$T/e3/val/a" "$T/e4/train/a" "$T/e4/val/b"
cp "$ONE" "$T/e2/train/a/"
cp "$ONE" "$T/e3/train/a/"
touch "$T/e3/train/b/readme.txt"
cp "$ONE" "$T/e3/val/a/"
cp "$ONE" "$T/e4/train/a/"
cp "$ONE" "$T/e4/val/b/"
err "missing train/ is an error" "$T/e1 has no train/ folder" "$T/e1"
err "missing val/ is an error" "$T/e2 has no val/ folder" "$T/e2"
err "an empty class folder is an error" "class folder $T/e3/train/b holds no image files" "$T/e3"
err "a val class missing from train is an error" "class folder $T/e4/val/b has no counterpart in the training classes" "$T/e4"
err "a class count unlike the model's is an error" "$F/png/train has 10 classes but vit_fmnist_tiny has 2 outputs: use --num-classes 10" "$F/png" --num-classes 2
$V eval vit_fmnist_tiny --num-classes 2 -w "$T/errw2.safetensors" --data "$F/png" >"$T/err.log" 2>&1
check "eval: a train/ of other classes than the weights' points at --classes (--num-classes would not load them)" \
    "[ $? -eq 1 ] && grep -qF -- 'has 2 outputs: for weights of other classes, \`--classes RUN/classes.json\`' \
     '$T/err.log'" "$(cat "$T/err.log")"
err "a missing folder is an error" "neither fashion-mnist nor an image folder (no folder $T/none holding" "$T/none"

# symlinked folders reached twice: 30 levels of two links each to the next level (2^30 walks before the fix)
mkdir -p "$T/e5/train/a" "$T/e5/val/a"
cp "$ONE" "$T/e5/train/a/"
cp "$ONE" "$T/e5/val/a/"
for k in $(seq 0 29); do
    mkdir -p "$T/e5/l$k"
    [ "$k" -lt 29 ] && ln -s "../l$((k + 1))" "$T/e5/l$k/x" && ln -s "../l$((k + 1))" "$T/e5/l$k/y"
done
ln -s ../../l0 "$T/e5/train/a/x"
timeout 120 $V train vit_fmnist_tiny --epochs 1 --data "$T/e5" --out "$T/errrun" >"$T/err.log" 2>&1
rc=$?
check "a folder reached twice through symlinks is an error naming both paths" \
    "[ $rc -eq 1 ] && grep -qF '/x/y is the folder $T/e5/train/a/x/' '$T/err.log'" "rc $rc: $(cat "$T/err.log")"
rm "$T/e5/train/a/x"
ln -s . "$T/e5/train/a/self"
err "a symlink loop is an error naming both paths" "$T/e5/train/a/self is the folder $T/e5/train/a reached again" \
    "$T/e5"
rm "$T/e5/train/a/self"
mkdir -p "$T/e5/train/b"$'\n'"c"
cp "$ONE" "$T/e5/train/b"$'\n'"c/"
err "a class folder named with a newline is an error" "a class folder in $T/e5/train: class name" "$T/e5"
rm -r "$T/e5/train/b"$'\n'"c"
# a class folder's link that points nowhere, or at itself: torchvision's is_dir() drops it silently, vitc says so
ln -s missing_target "$T/e5/val/b"
err "a dangling symlink among the class folders is an error naming it" \
    "cannot follow b in $T/e5/val (No such file or directory)" "$T/e5"
rm "$T/e5/val/b"
ln -s b "$T/e5/train/b"
err "... a symlink loop there too" "cannot follow b in $T/e5/train (Too many levels of symbolic links)" "$T/e5"
rm "$T/e5/train/b"

# classes.json that predict --classes refuses, naming the problem
cls() { # name, expected message part, JSON text
    printf '%s' "$3" >"$T/cls.json"
    $V predict vit_fmnist_tiny -w "$T/w.safetensors" --classes "$T/cls.json" "$ONE" >"$T/cls.log" 2>&1
    local rc=$?
    check "$1" "[ $rc -ne 0 ] && grep -qF -- '$2' '$T/cls.log'" "rc $rc: $(cat "$T/cls.log")"
}
TEN='"0":"a","1":"b","2":"c","3":"d","4":"e","5":"f","6":"g","7":"h","8":"i"'
cls "classes.json with text after the object" "$T/cls.json: text after the JSON object" "{$TEN,\"9\":\"j\"} x"
cls "classes.json with a duplicate key" "duplicate key \"8\"" "{$TEN,\"8\":\"j\"}"
cls "classes.json with a duplicate name" "classes 0 and 9 are both named" "{$TEN,\"9\":\"a\"}"
cls "classes.json with an empty name" "class 9: an empty class name" "{$TEN,\"9\":\"\"}"
cls "classes.json with a newline in a name" "has a control character (byte 0x0a)" "{$TEN,\"9\":\"j\\nk\"}"
cls "classes.json with a C1 control (CSI) in a name" "has a control character (U+009B)" "{$TEN,\"9\":\"j\\u009b2J\"}"
cls "classes.json with a key past its classes" "class 9 is missing or not a string (keys must be 0..9)" "{$TEN,\"10\":\"j\"}"
cls "classes.json with a number for a name" "class 9 is missing or not a string" "{$TEN,\"9\":9}"
# 200,000 classes read in one pass over the keys (it was quadratic: minutes), then compared with the model's 10
$PY -c "import json; json.dump({str(i): 'c%d' % i for i in range(200000)}, open('$T/big.json', 'w'))"
timeout 60 $V predict vit_fmnist_tiny -w "$T/w.safetensors" --classes "$T/big.json" "$ONE" >"$T/bigc.log" 2>&1
check "classes.json of 200,000 classes read quickly and compared with the model" \
    "grep -q '200000' '$T/bigc.log'" "$(cat "$T/bigc.log")"

# one class: a softmax over it is 1 whatever the weights, so training is refused, folder or model
mkdir -p "$T/oneclass/train/cat" "$T/oneclass/val/cat"
cp "$ONE" "$T/oneclass/train/cat/"
cp "$ONE" "$T/oneclass/val/cat/"
err "a one-class folder refused for training" "$T/oneclass/train has one class folder (cat)" "$T/oneclass"
$V train vit_fmnist_tiny --epochs 1 --data "$T/oneclass" --out "$T/errrun" --num-classes 1 >"$T/err.log" 2>&1
check "a one-output model refused for training, a usage error (2)" \
    "[ $? -eq 2 ] && grep -qF -- 'has 1 output: a classifier to train needs two or more' '$T/err.log'" \
    "$(cat "$T/err.log")"
check "... leaving no run folder" "[ ! -e '$T/errrun' ]"

# the pipeline benchmark
$V bench vit_fmnist_tiny --batch-size 64 --iters 3 --data "$F/jpg" --workers 2 >"$T/bench.log" 2>&1
check "bench --data prints the pipeline's img/s next to the training step's" \
    "grep -Eq '^input pipeline .*2 workers\): [0-9.]+ img/s alone; training step [0-9.]+ img/s: (not )?input-bound' '$T/bench.log'" \
    "$(cat "$T/bench.log")"

# resuming a folder run checks its data: the classes it was trained on (classes.json), the image count, the folder's
# absolute path (recorded, so a resume from another directory finds it), and a run folder inside the data is refused
small() { # DIR: 3 classes of 4 training and 2 validation images
    for s in train val; do
        for c in 0_tshirt 1_trouser 2_pullover; do
            mkdir -p "$1/$s/$c"
            find "$F/png/$s/$c" -name '*.png' | sort | head -n $([ $s = train ] && echo 4 || echo 2) | xargs cp -t "$1/$s/$c"
        done
    done
}
ST="vit_fmnist_tiny --num-classes 3 --batch-size 4 --workers 1 --log-every 1000"
small "$T/rs"
(cd "$T" && "$OLDPWD/vitc" train $ST --epochs 1 --data rs --out rsrun) >"$T/rs.log" 2>&1
check "a run on a small folder given by a relative path" "[ $? -eq 0 ] && [ -s '$T/rsrun/checkpoint.safetensors' ]" \
    "$(tail -3 "$T/rs.log")"
cp "$T/rsrun/classes.json" "$T/rs_classes.json"
cp "$T/rsrun/command.txt" "$T/rs_command.txt"
mv "$T/rs/train/0_tshirt" "$T/rs/train/9_tshirt"
mv "$T/rs/val/0_tshirt" "$T/rs/val/9_tshirt"
$V train $ST --resume "$T/rsrun" --epochs 2 >"$T/rs2.log" 2>&1
check "a resume whose data has other classes is refused, naming them" \
    "[ $? -eq 1 ] && grep -q \"gone: '0_tshirt', new: '9_tshirt'\" '$T/rs2.log'" "$(tail -3 "$T/rs2.log")"
check "... from another directory, the recorded absolute path found the data" "grep -q '$T/rs differ' '$T/rs2.log'" \
    "$(tail -3 "$T/rs2.log")"
check "... and the run folder is left as it was (classes.json, command.txt)" \
    "cmp -s '$T/rsrun/classes.json' '$T/rs_classes.json' && cmp -s '$T/rsrun/command.txt' '$T/rs_command.txt'"
mv "$T/rs/train/9_tshirt" "$T/rs/train/0_tshirt"
mv "$T/rs/val/9_tshirt" "$T/rs/val/0_tshirt"
for i in 1 2 3 4 5; do cp "$ONE" "$T/rs/train/1_trouser/extra$i.png"; done
$V train $ST --resume "$T/rsrun" --epochs 2 >"$T/rs3.log" 2>&1
check "a resume whose training set has other images is refused, saying so" \
    "[ $? -eq 1 ] && grep -q 'the run trained on 12 images and its data now has 17' '$T/rs3.log'" "$(tail -3 "$T/rs3.log")"
rm "$T"/rs/train/1_trouser/extra*.png
cp "$ONE" "$T/rs/train/1_trouser/extra1.png"
$V train $ST --resume "$T/rsrun" --epochs 2 >"$T/rs3b.log" 2>&1
check "... also when the steps of an epoch stay the same (12 → 13 images, batch 4)" \
    "[ $? -eq 1 ] && grep -q 'the run trained on 12 images and its data now has 13' '$T/rs3b.log'" "$(tail -3 "$T/rs3b.log")"
rm "$T/rs/train/1_trouser/extra1.png"
first=$(find "$T/rs/train/1_trouser" -name '*.png' | sort | head -1)
mv "$first" "$T/rs/train/1_trouser/renamed.png"
$V train $ST --resume "$T/rsrun" --epochs 2 >"$T/rs3c.log" 2>&1
check "... and when as many images are there but one has another name (the checkpoint's digest of the files)" \
    "[ $? -eq 1 ] && grep -q 'the run trained on other images than its data now holds' '$T/rs3c.log'" \
    "$(tail -3 "$T/rs3c.log")"
mv "$T/rs/train/1_trouser/renamed.png" "$first"
$V train $ST --resume "$T/rsrun" --out "$T/rsrun/" --epochs 2 >"$T/rs4.log" 2>&1
check "... restored, it resumes (--out naming the run folder another way)" \
    "[ $? -eq 0 ] && [ \$(wc -l <'$T/rsrun/metrics.csv') -eq 3 ]" "$(tail -3 "$T/rs4.log")"
$V train $ST --epochs 1 --data "$T/rs" --out "$T/rs/train/0_tshirt/run" >"$T/rs5.log" 2>&1
check "a run folder inside the data folder's train/ is refused" \
    "[ $? -eq 1 ] && grep -q 'lies inside $T/rs/train' '$T/rs5.log' && [ ! -e '$T/rs/train/0_tshirt/run' ]" \
    "$(tail -3 "$T/rs5.log")"
# a folder subset spans the classes (its files are class by class): --test-subset 3 of 6 validation images takes one
# of each class, so with class 0's two images unreadable one is skipped (the first three: two)
cp -r "$T/rs" "$T/rsb"
for f in "$T"/rsb/val/0_tshirt/*.png; do echo junk >"$f"; done
$V eval vit_fmnist_tiny --num-classes 3 -w "$T/rsrun/weights.safetensors" --data "$T/rsb" --test-subset 3 --json \
    >"$T/rssub.json" 2>"$T/rssub.err"
check "--test-subset on a folder takes images spread over its classes" \
    "[ $? -eq 0 ] && grep -q '\"images\": 2, \"skipped\": 1,' '$T/rssub.json'" "$(cat "$T/rssub.json" "$T/rssub.err")"
# a run folder elsewhere under the data folder (not in train/ or val/) is fine, and a stray symlink loop that is not
# an image is ignored, as other non-image files are
mkdir -p "$T/rs/runs"
ln -s loop "$T/rs/train/2_pullover/loop"
$V train $ST --epochs 1 --data "$T/rs" --out "$T/rs/runs/a" >"$T/rsa.log" 2>&1
check "a run folder under the data folder but outside train/ and val/ runs (a symlink loop there is ignored)" \
    "[ $? -eq 0 ] && [ -s '$T/rs/runs/a/weights.safetensors' ]" "$(tail -3 "$T/rsa.log")"
rm "$T/rs/train/2_pullover/loop"
# predict names the classes of the run's classes.json beside its weights, not the model's dataset's
$V predict vit_fmnist_tiny --num-classes 3 -w "$T/rsrun/weights.safetensors" "$ONE" --topk 3 >"$T/rsp.log" 2>"$T/rsp.err"
check "predict takes the class names of the classes.json beside the weights, and says so" \
    "[ $? -eq 0 ] && grep -q '1_trouser' '$T/rsp.log' && ! grep -q 'Trouser' '$T/rsp.log' && \
     grep -q 'class names from $T/rsrun/classes.json (beside the weights' '$T/rsp.err'" "$(cat "$T/rsp.log" "$T/rsp.err")"
# a W.classes.json beside the weights that cannot be looked at (here a symlink loop) is said, not passed over silently
ln -s weights.classes.json "$T/rsrun/weights.classes.json"
$V predict vit_fmnist_tiny --num-classes 3 -w "$T/rsrun/weights.safetensors" "$ONE" --topk 3 >"$T/rsl.log" 2>"$T/rsl.err"
check "a weights.classes.json that is a symlink loop is reported, and predict goes on" \
    "[ $? -eq 0 ] && grep -q 'classes.json beside the weights is not used: .*weights.classes.json: Too many levels of symbolic links' \
     '$T/rsl.err'" "$(cat "$T/rsl.err")"
rm "$T/rsrun/weights.classes.json"
# weight files record their model and the options that changed it: the commands that load them build it so, an
# option given winning, and another model's record is not taken
$V eval vit_fmnist_tiny -w "$T/rsrun/weights_best.safetensors" --data "$T/rs" --json >"$T/rsrec.json" 2>"$T/rsrec.err"
check "eval of a run's weights without its options builds the model the weights record, naming the options" \
    "[ $? -eq 0 ] && grep -q '\"images\": 6, \"skipped\": 0' '$T/rsrec.json' && grep -q \
     'notice: the model is built with the options $T/rsrun/weights_best.safetensors records: --num-classes 3$' \
     '$T/rsrec.err'" "$(cat "$T/rsrec.json" "$T/rsrec.err")"
$V predict vit_fmnist_tiny -w "$T/rsrun/weights.safetensors" "$ONE" --topk 3 >"$T/rsrp.log" 2>"$T/rsrp.err"
check "... predict too (the run's class names)" "[ $? -eq 0 ] && grep -q '1_trouser' '$T/rsrp.log'" \
    "$(cat "$T/rsrp.log" "$T/rsrp.err")"
$V predict vit_fmnist_tiny -w "$T/rsrun/weights.safetensors" "$ONE" >"$T/rsrd.log" 2>"$T/rsrd.err"
check "... whose default --topk (5) lists the 3 classes without a notice" \
    "[ $? -eq 0 ] && [ \$(grep -c '_' '$T/rsrd.log') -ge 3 ] && ! grep -q 'topk' '$T/rsrd.err'" \
    "$(cat "$T/rsrd.log" "$T/rsrd.err")"
$V eval vit_fmnist_tiny --num-classes 10 -w "$T/rsrun/weights.safetensors" --data fashion-mnist --test-subset 10 \
    >"$T/rsro.log" 2>&1
check "... an option given wins over the record (10 classes: the head's shape does not fit)" \
    "[ $? -eq 1 ] && grep -q 'head.weight (file (3, 64) vs model (10, 64))' '$T/rsro.log' && \
     ! grep -q 'built with the options' '$T/rsro.log'" "$(cat "$T/rsro.log")"
$V eval vit_fmnist_tiny_gap -w "$T/rsrun/weights.safetensors" --data "$T/rs" >"$T/rsrm.log" 2>&1
check "... another model's record is not taken, saying so" \
    "[ $? -eq 1 ] && grep -q 'records the model options \"--num-classes 3\" of vit_fmnist_tiny: not taken for \
vit_fmnist_tiny_gap' '$T/rsrm.log'" "$(cat "$T/rsrm.log")"
$V init vit_fmnist_tiny --heads 2 --ffn cffn --train-form --num-classes 3 -o "$T/h2.safetensors" >/dev/null 2>&1 &&
    $V deploy vit_fmnist_tiny -w "$T/h2.safetensors" -o "$T/h2d.safetensors" >"$T/h2d.log" 2>&1
check "deploy takes the record of training-form weights (--ffn cffn, --heads 2) and its output keeps it" \
    "[ $? -eq 0 ] && [ \"\$(meta '$T/h2d.safetensors' vitc_model_options)\" = '--num-classes 3 --ffn cffn --heads 2' ]" \
    "$(cat "$T/h2d.log")"
$V attention vit_fmnist_tiny -w "$T/h2d.safetensors" "$ONE" -o "$T/h2.png" >"$T/h2a.log" 2>&1
check "... attention builds its 2 heads (the record's --heads is not attention's head selection) and draws them" \
    "[ $? -eq 0 ] && [ -s '$T/h2.png' ] && grep -q 'h2d.safetensors records: --num-classes 3 --ffn cffn$' '$T/h2a.log' \
     && grep -q 'records 2 attention heads per stage' '$T/h2a.log'" "$(cat "$T/h2a.log")"
# a file name with a newline and a terminal escape is shown escaped, the warning on one line
cp -r "$T/rs" "$T/rsn"
bad_name=$(printf 'x\nname\033[31m.png')
echo junk >"$T/rsn/train/1_trouser/$bad_name"
$V train $ST --epochs 1 --data "$T/rsn" --out "$T/rsnrun" >"$T/rsn.log" 2>&1
check "an unreadable file's odd name is escaped in its warning (one line, no escape byte)" \
    "[ $? -eq 0 ] && grep -qF 'skipping unreadable image: $T/rsn/train/1_trouser/x\\nname\\x1b[31m.png' '$T/rsn.log' && \
     ! grep -q \$'\\033' '$T/rsn.log'" "$(grep -a skipping "$T/rsn.log" | cat -A | head -3)"
# a path past PATH_MAX inside a class folder is an error naming the reason, not an image silently left out
cp -r "$T/rs" "$T/rsd"
(cd "$T/rsd/train/1_trouser" && for i in $(seq 22); do n=$(printf 'd%.0s' $(seq 200)); mkdir "$n" && cd "$n"; done)
$V train $ST --epochs 1 --data "$T/rsd" --out "$T/rsdrun" >"$T/rsd.log" 2>&1
check "a path past PATH_MAX in a folder is refused, saying why" \
    "[ $? -eq 1 ] && grep -q 'cannot open a folder of an image folder (File name too long, a path of [0-9]* bytes)' '$T/rsd.log'" \
    "$(head -c 300 "$T/rsd.log")"
# a checkpoint of the previous format (no train-images, the data path as typed, relative) resumes: the path, found
# from the resume's directory, is the same folder (no change noted), and no image count is compared
$PY - "$T/rsrun/checkpoint.safetensors" <<'PYEOF'
import json, struct, sys
p = sys.argv[1]
b = open(p, "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
m = h["__metadata__"]
del m["train-images"]
m["data"] = "rs"
t = json.dumps(h, separators=(",", ":")).encode()
t += b" " * (-len(t) % 8)
open(p, "wb").write(struct.pack("<Q", len(t)) + t + b[8 + n:])
PYEOF
(cd "$T" && "$OLDPWD/vitc" train $ST --resume rsrun --epochs 3) >"$T/rsold.log" 2>&1
check "a checkpoint of the previous format (relative data path, no image count) resumes, noting no data change" \
    "[ $? -eq 0 ] && ! grep -q 'changes data' '$T/rsold.log' && [ \$(wc -l <'$T/rsrun/metrics.csv') -eq 4 ]" \
    "$(tail -3 "$T/rsold.log")"
# fine-tuning from deployed-form weights (Next-ViT's merged BatchNorms) is refused, naming the form (the message had
# read freed memory)
NV="nextvit_small --depths 1,1,5,1 --img-size 32 --num-classes 3"
$V init $NV -o "$T/nv_dep.safetensors" >/dev/null 2>&1
$V train $NV --epochs 1 --batch-size 2 --workers 1 --data "$T/rs" --out "$T/nvrun" --init-from "$T/nv_dep.safetensors" \
    >"$T/nv.log" 2>&1
check "--init-from deployed-form weights refused, saying what to start from" \
    "[ $? -eq 1 ] && grep -q 'holds deployed-form weights but the model is built in its training form (a training run.s): start from training-form weights' '$T/nv.log'" \
    "$(tail -2 "$T/nv.log")"
# a Next-ViT file without its form record (as a converted checkpoint): taken as the training form, in a line that says
# what a merged export would suffer (both forms share their keys)
$V init $NV --train-form -o "$T/nv_tr.safetensors" >/dev/null 2>&1
/usr/bin/python3 -c "import sys; sys.path.insert(0, 'tests/reference'); import st; st.save(sys.argv[2], st.load(sys.argv[1]))" \
    "$T/nv_tr.safetensors" "$T/nv_norec.safetensors"
$V train $NV --epochs 1 --batch-size 2 --workers 1 --data "$T/rs" --out "$T/nvrun2" --init-from "$T/nv_norec.safetensors" \
    >"$T/nv2.log" 2>&1
check "--init-from a Next-ViT file without a form record: trains, saying it takes the training form" \
    "[ $? -eq 0 ] && grep -q 'nv_norec.safetensors records no form: taken as the training form' '$T/nv2.log'" \
    "$(tail -3 "$T/nv2.log")"
$V deploy $NV --weights "$T/nv_norec.safetensors" -o "$T/nv_norec_dep.safetensors" >"$T/nv3.log" 2>&1
check "deploy of a Next-ViT file without a form record: merged, saying it took the training form and how to mark an export" \
    "[ $? -eq 0 ] && grep -q 'nv_norec.safetensors records no form: taken as the training form.*--form deployed' '$T/nv3.log'" \
    "$(tail -3 "$T/nv3.log")"
# ... but not for a file that is no weights of that model (another model's, a training checkpoint): refused, no note
for f in "$T/png/weights.safetensors" "$T/nvrun2/checkpoint.safetensors"; do
    $V deploy $NV --weights "$f" -o "$T/nv_other_dep.safetensors" >"$T/nv4.log" 2>&1
    rc=$?
    check "deploy of $(basename "$(dirname "$f")")/$(basename "$f"): refused without the form note" \
        "[ $rc -eq 1 ] && ! grep -q 'records no form' '$T/nv4.log'" "rc $rc: $(cat "$T/nv4.log")"
done
# fine-tuning a grey-image model from RGB weights with another class count: the patch embedding adapted as timm's
# adapt_input_conv (summed over the three channels; tests/reference/test_recipe.py checks the values), the head new
$V init vit_fmnist_tiny --in-chans 3 --ffn cffn --train-form -o "$T/rgb.safetensors" >/dev/null 2>&1
$V train $ST --ffn cffn --epochs 1 --data "$T/rs" --out "$T/rgbrun" --init-from "$T/rgb.safetensors" >"$T/rgb.log" 2>&1
check "--init-from RGB weights into a 1-channel model: the patch embedding adapted, the head re-initialised" \
    "[ $? -eq 0 ] && grep -q 'patch_embed.proj.weight adapted from 3 input channels to 1' '$T/rgb.log' && \
     grep -q 'head.weight re-initialised: 10 classes' '$T/rgb.log'" "$(tail -2 "$T/rgb.log")"
# deploy (the run trained cFFN) puts the run's classes.json beside a deployed file in another folder as its own
# m.classes.json, where predict then names the classes; a folder's classes.json of other names stays as it was, and a
# second deployed model's names do not reach it
mkdir -p "$T/dep" "$T/dep2"
$V deploy vit_fmnist_tiny -w "$T/rgbrun/weights.safetensors" -o "$T/dep/m.safetensors" >"$T/dep.log" 2>&1
$V predict vit_fmnist_tiny -w "$T/dep/m.safetensors" "$ONE" >"$T/dep_pred.log" 2>&1
c1=$(/usr/bin/python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['1'])" "$T/rgbrun/classes.json")
check "deploy copies the run's classes.json beside a file in another folder as m.classes.json; predict names the classes" \
    "cmp -s '$T/rgbrun/classes.json' '$T/dep/m.classes.json' && grep -q 'wrote $T/dep/m.classes.json' '$T/dep.log' && \
     [ ! -e '$T/dep/classes.json' ] && grep -q 'class names from $T/dep/m.classes.json' '$T/dep_pred.log' && \
     grep -q '$c1' '$T/dep_pred.log'" "$(cat "$T/dep.log" "$T/dep_pred.log")"
echo '{"0": "a", "1": "b", "2": "c"}' >"$T/dep2/classes.json"
$V deploy vit_fmnist_tiny -w "$T/rgbrun/weights.safetensors" -o "$T/dep2/m.safetensors" >"$T/dep2.log" 2>&1
$V predict vit_fmnist_tiny -w "$T/dep2/m.safetensors" "$ONE" >"$T/dep2_pred.log" 2>&1
check "deploy into a folder with another classes.json: it stays, the names go to m.classes.json, which predict takes" \
    "cmp -s '$T/rgbrun/classes.json' '$T/dep2/m.classes.json' && grep -q 'wrote $T/dep2/m.classes.json' '$T/dep2.log' && \
     grep -q '\"a\"' '$T/dep2/classes.json' && grep -q 'class names from $T/dep2/m.classes.json' '$T/dep2_pred.log' && \
     grep -q '$c1' '$T/dep2_pred.log'" "$(cat "$T/dep2.log" "$T/dep2_pred.log")"
# a second deploy to m.safetensors from weights without class names removes the first one's m.classes.json, which
# named the replaced weights' classes (predict then names Fashion-MNIST's, the model's dataset's)
$V init vit_fmnist_tiny --in-chans 3 --ffn cffn --train-form --seed 2 -o "$T/rgb_nonames.safetensors" >/dev/null 2>&1
$V deploy vit_fmnist_tiny -w "$T/rgb_nonames.safetensors" -o "$T/dep/m.safetensors" >"$T/dep3.log" 2>&1
$V predict vit_fmnist_tiny -w "$T/dep/m.safetensors" "$ONE" >"$T/dep3_pred.log" 2>&1
check "deploy of weights without class names over an earlier deploy: its m.classes.json removed, predict not using it" \
    "[ ! -e '$T/dep/m.classes.json' ] && grep -q 'removed $T/dep/m.classes.json' '$T/dep3.log' && \
     ! grep -q 'class names from' '$T/dep3_pred.log' && ! grep -q '$c1' '$T/dep3_pred.log'" \
    "$(cat "$T/dep3.log" "$T/dep3_pred.log")"
# a validation split with no readable image is refused before training, not at the first epoch's end
cp -r "$T/rs" "$T/rsv"
for f in "$T"/rsv/val/*/*.png; do echo junk >"$f"; done
$V train $ST --epochs 1 --data "$T/rsv" --out "$T/rsvrun" >"$T/rsv.log" 2>&1
check "no readable validation image: refused before training" \
    "[ $? -eq 1 ] && grep -q 'none of the 6 validation images of $T/rsv can be read (the first: ' '$T/rsv.log' && \
     ! grep -q '^Epoch\|img/s' '$T/rsv.log' && [ ! -e '$T/rsvrun' ]" "$(tail -3 "$T/rsv.log")"
